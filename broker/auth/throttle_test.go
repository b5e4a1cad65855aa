package auth

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestThrottle is the decision half of issue 27 finding 10 (b): after
// Failures wrong passwords within Window from one address, its attempts
// are refused for Backoff without being checked, the right password
// included; other addresses are not affected; an IPv6 /64 counts as one
// address; the table is bounded; Failures < 0 turns throttling off.
func TestThrottle(t *testing.T) {
	a, err := Parse([]byte("[[user]]\nname = \"bob\"\npassword = \"pw-bob\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	a.SetThrottle(Throttle{Failures: 3, Window: time.Minute, Backoff: 10 * time.Minute, MaxAddrs: 4})
	try := func(remote, pass string) error {
		t.Helper()
		_, err := a.BasicFrom(remote, "bob", pass)
		return err
	}
	if err := try("192.0.2.1:1000", "pw-bob"); err != nil {
		t.Fatalf("right password: %v", err)
	}
	// Two failures, a window later a third: not throttled (the window
	// moved on).
	for range 2 {
		if err := try("192.0.2.1:1000", "wrong"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("wrong password: %v", err)
		}
	}
	now = now.Add(time.Minute)
	if err := try("192.0.2.1:1001", "wrong"); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("wrong password in a new window: %v", err)
	}
	if err := try("192.0.2.1:1001", "pw-bob"); err != nil {
		t.Fatalf("right password after failures in two windows: %v", err)
	}
	for range 2 {
		_ = try("192.0.2.1:1002", "wrong")
	}
	hashed := a.verify.hashed.Load()
	for _, pass := range []string{"wrong", "pw-bob"} {
		if err := try("192.0.2.1:1003", pass); !errors.Is(err, ErrThrottled) {
			t.Errorf("after 3 failures, %q: %v, want ErrThrottled", pass, err)
		}
	}
	if n := a.verify.hashed.Load() - hashed; n != 0 {
		t.Errorf("%d bcrypt verifications for throttled attempts, want 0", n)
	}
	if err := try("192.0.2.2:1000", "pw-bob"); err != nil {
		t.Errorf("another address: %v", err)
	}
	now = now.Add(10 * time.Minute)
	if err := try("192.0.2.1:1004", "pw-bob"); err != nil {
		t.Errorf("after the backoff: %v", err)
	}

	// IPv6: one /64 is one address.
	for i := range 3 {
		_ = try(fmt.Sprintf("[2001:db8:0:1::%x]:1", i+1), "wrong")
	}
	if err := try("[2001:db8:0:1:ffff::9]:1", "pw-bob"); !errors.Is(err, ErrThrottled) {
		t.Errorf("same /64: %v, want ErrThrottled", err)
	}
	if err := try("[2001:db8:0:2::1]:1", "pw-bob"); err != nil {
		t.Errorf("another /64: %v", err)
	}

	// The table holds at most MaxAddrs addresses.
	for i := range 100 {
		_ = try(fmt.Sprintf("198.51.100.%d:1", i), "wrong")
		if n := a.thr.Load().size(); n > 4 {
			t.Fatalf("%d addresses remembered, want at most 4", n)
		}
	}

	a.SetThrottle(Throttle{Failures: -1})
	for range 20 {
		_ = try("192.0.2.9:1", "wrong")
	}
	if err := try("192.0.2.9:1", "pw-bob"); err != nil {
		t.Errorf("throttling off: %v", err)
	}
	// Without an ACL there is no password to guess.
	if _, err := Open().BasicFrom("192.0.2.1:1", "bob", "pw-bob"); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("open broker: %v", err)
	}
}
