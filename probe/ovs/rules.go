package ovs

import "fmt"

// ForwardRules are the two rules that carry the test traffic between
// OpenFlow ports in and out, at priority 100.
func ForwardRules(in, out int) []string {
	return []string{
		fmt.Sprintf("priority=100,in_port=%d,actions=output:%d", in, out),
		fmt.Sprintf("priority=100,in_port=%d,actions=output:%d", out, in),
	}
}

// FillerRules returns n distinct drop rules at the given priority that never
// match test traffic (they match 172.16.0.0/12 addresses and TCP ports the
// probe does not use). Placed above the forwarding rules they make the
// classifier consult more rules and subtables on every upcall: the
// "OpenFlow rules" factor. Rules rotate over four match shapes (ip nw_dst;
// udp nw_src+tp_dst; tcp tp_src+tp_dst; udp tp_src below 1024) so they
// occupy several subtables; the last makes datapath flows match on UDP
// source-port bits, so distinct flows need distinct megaflows, as behind a
// real port-based ACL.
func FillerRules(n, priority int) []string {
	rules := make([]string, 0, n)
	for i := range n {
		a, b, c := 16+(i>>16)&15, (i>>8)&255, i&255
		switch i % 4 {
		case 0:
			rules = append(rules, fmt.Sprintf("priority=%d,ip,nw_dst=172.%d.%d.%d,actions=drop", priority, a, b, c))
		case 1:
			rules = append(rules, fmt.Sprintf("priority=%d,udp,nw_src=172.%d.%d.%d,tp_dst=%d,actions=drop", priority, a, b, c, 1+i%60000))
		case 2:
			rules = append(rules, fmt.Sprintf("priority=%d,tcp,tp_src=%d,tp_dst=%d,actions=drop", priority, 1+i%65535, 1+(i/65535)%65535))
		default:
			rules = append(rules, fmt.Sprintf("priority=%d,udp,tp_src=%d,tp_dst=%d,actions=drop", priority, 1+(i/4)%1023, 1+(i/4092)%65535))
		}
	}
	return rules
}
