package mqtt

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// deliveryIDs returns the client ids of l, sorted, but for the fillers
// (ids starting with "f") that make the topic one whose list is kept.
func deliveryIDs(l *deliveryList) []string {
	var ids []string
	for _, d := range l.subs {
		if d.cl.ID[0] != 'f' {
			ids = append(ids, d.cl.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestDeliveriesKeptUntilChange(t *testing.T) {
	s := newServer()
	defer s.Close()
	add := func(id string) *Client {
		cl, _, _ := newTestClient()
		cl.ID = id
		s.Clients.Add(cl)
		return cl
	}
	for i := 0; i < minDeliveries; i++ {
		id := fmt.Sprintf("f%d", i)
		add(id)
		s.Topics.Subscribe(id, packets.Subscription{Filter: "t/1"})
	}
	add("a")
	add("b")
	s.Topics.Subscribe("a", packets.Subscription{Filter: "t/+", Qos: 1})
	s.Topics.Subscribe("b", packets.Subscription{Filter: "t/1", Qos: 0})

	l1, _ := s.deliveriesTo("t/1")
	if got := deliveryIDs(l1); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("deliveries %v, want [a b]", got)
	}
	if l2, _ := s.deliveriesTo("t/1"); l2 != l1 {
		t.Fatal("the list was made again with nothing changed")
	}

	for _, tc := range []struct {
		name   string
		change func()
		want   []string
	}{
		{"a subscription added", func() {
			add("c")
			s.Topics.Subscribe("c", packets.Subscription{Filter: "#"})
		}, []string{"a", "b", "c"}},
		{"a subscription removed", func() { s.Topics.Unsubscribe("t/1", "b") }, []string{"a", "c"}},
		{"a client removed", func() { s.Clients.Delete("a") }, []string{"c"}},
		{"a client replaced", func() { add("c") }, []string{"c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.deliveriesTo("t/1")
			tc.change()
			l, _ := s.deliveriesTo("t/1")
			if l == before {
				t.Fatal("the kept list was used after the change")
			}
			if got := deliveryIDs(l); !slices.Equal(got, tc.want) {
				t.Fatalf("deliveries %v, want %v", got, tc.want)
			}
			for _, d := range l.subs {
				if cur, _ := s.Clients.Get(d.cl.ID); cur != d.cl {
					t.Fatalf("client %s: a client no longer known", d.cl.ID)
				}
			}
		})
	}

	t.Run("a topic with few subscribers is not kept", func(t *testing.T) {
		l, subs := s.deliveriesTo("t/2") // a's t/+ (a is gone, its subscription stays) and c's #
		if l != nil || subs == nil || len(subs.Subscriptions) != 2 {
			t.Fatalf("list %v, subscribers %+v: want the subscribers found, not kept", l, subs)
		}
		s.deliveries.mu.RLock()
		_, kept := s.deliveries.m["t/2"]
		s.deliveries.mu.RUnlock()
		if kept {
			t.Fatal("t/2 kept")
		}
	})

	t.Run("shared subscriptions are not kept", func(t *testing.T) {
		add("d")
		s.Topics.Subscribe("d", packets.Subscription{Filter: "$share/g/t/1", ShareName: []string{"g"}})
		l, subs := s.deliveriesTo("t/1")
		if l != nil || subs == nil || len(subs.Shared) == 0 {
			t.Fatalf("list %v, subscribers %+v: want the subscribers with the shared group", l, subs)
		}
	})
}

func TestDeliveriesBounded(t *testing.T) {
	s := newServer()
	defer s.Close()
	for i := 0; i < minDeliveries; i++ {
		cl, _, _ := newTestClient()
		cl.ID = fmt.Sprintf("c%d", i)
		s.Clients.Add(cl)
		s.Topics.Subscribe(cl.ID, packets.Subscription{Filter: "#"})
	}
	for i := 0; i < maxDeliveryTopics+10; i++ {
		topic := fmt.Sprintf("t/%d", i)
		if l, _ := s.deliveriesTo(topic); l == nil || len(l.subs) != minDeliveries {
			t.Fatalf("%s: %v, want %d deliveries", topic, l, minDeliveries)
		}
		s.deliveries.mu.RLock()
		n, topics := s.deliveries.n, len(s.deliveries.m)
		s.deliveries.mu.RUnlock()
		if topics > maxDeliveryTopics || n > maxDeliveries || n != minDeliveries*topics {
			t.Fatalf("after %s: %d topics and %d deliveries kept", topic, topics, n)
		}
	}
}
