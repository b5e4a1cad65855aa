//go:build !linux

package ovs

import "syscall"

func daemonAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
