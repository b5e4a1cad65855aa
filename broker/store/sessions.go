package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/safefile"
	"github.com/quiot/quiot/internal/wire"
)

// SessionsFileName is the MQTT session file inside the data directory.
const SessionsFileName = "mqtt-sessions.db"

// sessionsMagic marks a quiot MQTT session store.
const sessionsMagic = "quiot mqtt sessions"

var (
	bucketSessions = []byte("sessions") // c/ID, s/ID\0filter, i/ID\0packetID
	keyWatermark   = []byte("watermark")
)

// SessionCore is what Sessions needs of the topic space (a *space.Space,
// the broker's Space()): its taps, and its history and retained messages,
// which are the source of truth after a restart.
type SessionCore interface {
	AddTap(fn func(m *space.Message))
	HistoryAfter(seq uint64) ([]*space.Message, uint64)
	RetainedMessages() []*space.Message
}

// SessionOptions configure Sessions.
type SessionOptions struct {
	// Dir is the data directory (required).
	Dir string
	// Server is the mochi server the hook is added to (required).
	Server *mqtt.Server
	// Core is the broker whose topic space MQTT shares; nil means a
	// standalone MQTT broker (sessions are kept, nothing is replayed).
	Core SessionCore
	// CommitDelay and NoSync are as in Options.
	CommitDelay time.Duration
	NoSync      bool
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

// Sessions is a mochi storage hook that keeps persistent MQTT sessions
// (clients whose session outlives the connection, their subscriptions and
// their queued QoS 1 messages) in DIR/mqtt-sessions.db, with group commits
// off the delivery path. Clean sessions are not written at all.
//
// Writes are asynchronous, so a crash can lose the last commit's queue
// entries; the broker's history covers them: the store keeps a watermark,
// the broker sequence number up to which every QoS 1 message's fan-out
// into mochi is committed, and at start the history above it is delivered
// again to the restored sessions (duplicates are possible, loss is not,
// while the history still holds the messages). Retained messages come
// from the broker, not from this file.
type Sessions struct {
	mqtt.HookBase
	opts SessionOptions
	db   *bolt.DB
	log  *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond
	ops     []sessOp
	closing bool
	done    chan struct{}

	// Fan-out tracking (see the type comment), under mu.
	watermark uint64       // committed value
	pending   []pendingMsg // QoS 1 broker messages not yet fanned out, in seq order
	byKey     map[msgKey][]uint64
	lastTap   uint64
	floor     uint64 // the watermark never passes it (tracking overflowed)
	ready     bool   // the start-up replay has run

	// order numbers queued messages (storage.Message.Sent), so that they
	// are loaded in their order after a restart.
	order atomic.Int64
}

type sessOp struct {
	key []byte
	val []byte // nil: delete
	pfx bool   // delete every key with this prefix
}

type msgKey struct {
	topic string
	data  *byte
	n     int
}

type pendingMsg struct {
	seq  uint64
	key  msgKey
	done bool
}

// maxPending bounds the fan-out tracking; beyond it the watermark stops
// (more is replayed at the next start, nothing is lost).
const maxPending = 1 << 16

// OpenSessions opens (or creates) the session file. Add the result to the
// server with Server.AddHook(s, nil) before Serve.
func OpenSessions(o SessionOptions) (*Sessions, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Dir == "" || o.Server == nil {
		return nil, errors.New("mqtt sessions: Dir and Server are required")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("couldn't create data directory: %w", err)
	}
	if err := safefile.CheckDir(o.Dir); err != nil {
		return nil, err
	}
	path := filepath.Join(o.Dir, SessionsFileName)
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		_ = os.Remove(path) // created, never written
	}
	db, err := openBolt(path, &bolt.Options{Timeout: time.Second, NoSync: o.NoSync, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	switch {
	case errors.Is(err, safefile.ErrUnsafe):
		return nil, err
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("%w: %s is not a bbolt file, or both its headers are destroyed (%v)", ErrForeign, path, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %v; move it away to start without MQTT sessions", ErrCorrupt, path, err)
	}
	s := &Sessions{opts: o, db: db, log: o.Logger, done: make(chan struct{}), byKey: map[msgKey][]uint64{}, floor: ^uint64(0)}
	s.cond = sync.NewCond(&s.mu)
	s.order.Store(time.Now().UnixNano()) // above the last run's
	if err := s.check(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if o.Core != nil {
		o.Core.AddTap(s.tap)
	}
	go s.run()
	return s, nil
}

// check validates or initialises the file.
func (s *Sessions) check() (err error) {
	defer faultsPanic()()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, s.db.Path(), r)
		}
	}()
	return s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return fmt.Errorf("%w: %s holds another program's bbolt data", ErrForeign, s.db.Path())
			}
			if meta, err = tx.CreateBucket(bucketMeta); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(bucketSessions); err != nil {
				return err
			}
			if err := meta.Put(keyMagic, []byte(sessionsMagic)); err != nil {
				return err
			}
			return meta.Put(keyWatermark, u64(0))
		}
		if string(meta.Get(keyMagic)) != sessionsMagic || tx.Bucket(bucketSessions) == nil {
			return fmt.Errorf("%w: %s holds another program's bbolt data", ErrForeign, s.db.Path())
		}
		w, ok := getU64(meta.Get(keyWatermark))
		if !ok {
			return fmt.Errorf("%w: %s: bad watermark", ErrCorrupt, s.db.Path())
		}
		s.watermark = w
		return nil
	})
}

// ID names the hook.
func (s *Sessions) ID() string { return "quiot-sessions" }

// Provides reports the events the hook handles.
func (s *Sessions) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnSubscribed, mqtt.OnUnsubscribed,
		mqtt.OnWillSent, mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped, mqtt.OnClientExpired,
		mqtt.StoredClients, mqtt.StoredSubscriptions, mqtt.StoredInflightMessages,
		mqtt.StoredRetainedMessages, mqtt.StoredSysInfo:
		return true
	case mqtt.OnPublished:
		return s.opts.Core != nil
	}
	return false
}

// persistent reports whether cl's session outlives its connection.
func persistent(cl *mqtt.Client) bool {
	if cl.Net.Inline {
		return false
	}
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props().SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

func clientKey(id string) []byte { return append([]byte("c/"), id...) }
func clientPrefix(kind, id string) []byte {
	return append(append([]byte(kind+"/"), id...), 0)
}
func subKey(id, filter string) []byte { return append(clientPrefix("s", id), filter...) }
func inflightKey(id string, pid uint16) []byte {
	return binary.BigEndian.AppendUint16(clientPrefix("i", id), pid)
}

func (s *Sessions) queue(ops ...sessOp) {
	s.mu.Lock()
	s.ops = append(s.ops, ops...)
	if len(s.ops) == len(ops) {
		s.cond.Signal()
	}
	s.mu.Unlock()
}

func marshal(v storage.Serializable) []byte {
	b, _ := v.MarshalBinary() // JSON of plain fields: cannot fail
	return b
}

// deleteClient removes a session and everything it holds.
func (s *Sessions) deleteClient(id string) {
	s.queue(sessOp{key: clientKey(id)}, sessOp{key: clientPrefix("s", id), pfx: true}, sessOp{key: clientPrefix("i", id), pfx: true})
}

// OnSessionEstablished writes a persistent session's client record (and
// drops a former persistent session of a client that now starts clean).
func (s *Sessions) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if !persistent(cl) {
		s.deleteClient(cl.ID)
		return
	}
	s.writeClient(cl)
}

// OnWillSent updates the client record (its will is gone).
func (s *Sessions) OnWillSent(cl *mqtt.Client, _ packets.Packet) {
	if persistent(cl) {
		s.writeClient(cl)
	}
}

func (s *Sessions) writeClient(cl *mqtt.Client) {
	props := cl.Properties.Props()
	in := &storage.Client{
		ID:              cl.ID,
		T:               storage.ClientKey,
		Remote:          cl.Net.Remote,
		Listener:        cl.Net.Listener,
		Username:        cl.Properties.Username,
		Clean:           cl.Properties.Clean,
		ProtocolVersion: cl.Properties.ProtocolVersion,
		Properties: storage.ClientProperties{
			SessionExpiryInterval:     props.SessionExpiryInterval,
			SessionExpiryIntervalFlag: props.SessionExpiryIntervalFlag,
			AuthenticationMethod:      props.AuthenticationMethod,
			AuthenticationData:        props.AuthenticationData,
			RequestProblemInfo:        props.RequestProblemInfo,
			RequestProblemInfoFlag:    props.RequestProblemInfoFlag,
			RequestResponseInfo:       props.RequestResponseInfo,
			ReceiveMaximum:            props.ReceiveMaximum,
			TopicAliasMaximum:         props.TopicAliasMaximum,
			User:                      props.User,
			MaximumPacketSize:         props.MaximumPacketSize,
		},
		Will: storage.ClientWill(cl.Properties.Will()),
	}
	s.queue(sessOp{key: clientKey(cl.ID), val: marshal(in)})
}

// OnDisconnect removes a session that ends with its connection.
func (s *Sessions) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if !expire || errors.Is(cl.StopCause(), packets.ErrSessionTakenOver) {
		return
	}
	s.deleteClient(cl.ID)
}

// OnClientExpired removes an expired session.
func (s *Sessions) OnClientExpired(cl *mqtt.Client) { s.deleteClient(cl.ID) }

// OnSubscribed records a persistent session's subscriptions.
func (s *Sessions) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	if !persistent(cl) {
		return
	}
	for i, f := range pk.Filters {
		if i >= len(codes) || codes[i] >= 0x80 {
			continue
		}
		in := &storage.Subscription{
			ID:                string(subKey(cl.ID, f.Filter)),
			T:                 storage.SubscriptionKey,
			Client:            cl.ID,
			Qos:               codes[i],
			Filter:            f.Filter,
			Identifier:        f.Identifier,
			NoLocal:           f.NoLocal,
			RetainHandling:    f.RetainHandling,
			RetainAsPublished: f.RetainAsPublished,
		}
		s.queue(sessOp{key: subKey(cl.ID, f.Filter), val: marshal(in)})
	}
}

// OnUnsubscribed removes subscriptions.
func (s *Sessions) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if !persistent(cl) {
		return
	}
	for _, f := range pk.Filters {
		s.queue(sessOp{key: subKey(cl.ID, f.Filter)})
	}
}

// OnQosPublish records a message queued for (or in flight to) a
// persistent session.
func (s *Sessions) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if !persistent(cl) || pk.FixedHeader.Type != packets.Publish {
		return
	}
	props := pk.Properties.Copy(false)
	in := &storage.Message{
		ID:          string(inflightKey(cl.ID, pk.PacketID)),
		T:           storage.InflightKey,
		Client:      cl.ID,
		Origin:      pk.Origin,
		PacketID:    pk.PacketID,
		FixedHeader: pk.FixedHeader,
		TopicName:   pk.TopicName,
		Payload:     pk.Payload,
		Sent:        s.order.Add(1), // queue order, restored at load
		Created:     pk.Created,
		Properties: storage.MessageProperties{
			PayloadFormat:          props.PayloadFormat,
			PayloadFormatFlag:      props.PayloadFormatFlag,
			MessageExpiryInterval:  props.MessageExpiryInterval,
			ContentType:            props.ContentType,
			ResponseTopic:          props.ResponseTopic,
			CorrelationData:        props.CorrelationData,
			SubscriptionIdentifier: props.SubscriptionIdentifier,
			TopicAlias:             props.TopicAlias,
			User:                   props.User,
		},
	}
	s.queue(sessOp{key: inflightKey(cl.ID, pk.PacketID), val: marshal(in)})
}

// OnQosComplete removes an acknowledged message.
func (s *Sessions) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if persistent(cl) {
		s.queue(sessOp{key: inflightKey(cl.ID, pk.PacketID)})
	}
}

// OnQosDropped removes a message mochi gave up on. A session taken over
// by a reconnecting client is not giving up: mochi clears the old client's
// queue after copying it to the new one, under the same client id and
// packet identifiers, so deleting those records would drop the new
// client's queue from the file (lost at the next restart).
func (s *Sessions) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() {
		return
	}
	s.OnQosComplete(cl, pk)
}

// StoredClients returns the saved sessions.
func (s *Sessions) StoredClients() ([]storage.Client, error) {
	var out []storage.Client
	err := s.iter("c/", func(v []byte) error {
		var c storage.Client
		if err := c.UnmarshalBinary(v); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// StoredSubscriptions returns the saved subscriptions.
func (s *Sessions) StoredSubscriptions() ([]storage.Subscription, error) {
	var out []storage.Subscription
	err := s.iter("s/", func(v []byte) error {
		var c storage.Subscription
		if err := c.UnmarshalBinary(v); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// StoredInflightMessages returns the saved queued messages. mochi sends a
// session's queue in the order of uint16(Created) (seconds, so not in
// queue order within a second); Created is set to each message's place in
// its session's queue, so the queue goes out in its order.
func (s *Sessions) StoredInflightMessages() ([]storage.Message, error) {
	var out []storage.Message
	err := s.iter("i/", func(v []byte) error {
		var c storage.Message
		if err := c.UnmarshalBinary(v); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	slices.SortStableFunc(out, func(a, b storage.Message) int {
		return cmp.Or(strings.Compare(a.Client, b.Client), cmp.Compare(a.Sent, b.Sent))
	})
	place := 0
	for i := range out {
		if i > 0 && out[i].Client != out[i-1].Client {
			place = 0
		}
		place++
		out[i].Created = int64(place)
	}
	return out, err
}

// StoredRetainedMessages returns the broker's retained messages (the
// broker's store keeps them; mochi gets its copy from there).
func (s *Sessions) StoredRetainedMessages() ([]storage.Message, error) {
	if s.opts.Core == nil {
		return nil, nil
	}
	var out []storage.Message
	for _, m := range s.opts.Core.RetainedMessages() {
		qos := min(m.QoS, 1)
		out = append(out, storage.Message{
			T:           storage.RetainedKey,
			ID:          "r/" + m.Topic,
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: true},
			TopicName:   m.Topic,
			Payload:     m.Payload,
			Created:     time.Now().Unix(),
			Properties:  storage.MessageProperties{User: timeProperty(m)},
		})
	}
	return out, nil
}

// timeProperty is the bridge's send-stamp user property.
func timeProperty(m *space.Message) []packets.UserProperty {
	if m.Time == 0 {
		return nil
	}
	return []packets.UserProperty{{Key: wire.MQTTStampProperty, Val: wire.FormatStamp(m.Time)}}
}

// StoredSysInfo is called last while mochi reads its store: the restored
// sessions are in place, so the broker history above the watermark is
// delivered to them here, before any client connects.
func (s *Sessions) StoredSysInfo() (storage.SystemInfo, error) {
	for _, cl := range s.opts.Server.Clients.GetAll() {
		advancePacketIDs(cl)
	}
	if s.opts.Core == nil {
		return storage.SystemInfo{}, nil
	}
	s.mu.Lock()
	w := s.watermark
	s.mu.Unlock()
	msgs, last := s.opts.Core.HistoryAfter(w)
	cl := s.opts.Server.NewClient(nil, "local", "quiot-sessions-replay", true)
	cl.Properties.ProtocolVersion = 5
	n := 0
	for _, m := range msgs {
		if m.Seq > last || m.QoS == 0 {
			continue
		}
		pk := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
			TopicName:   m.Topic,
			Payload:     m.Payload,
			PacketID:    1,
		}
		pk.Properties.User = timeProperty(m)
		if err := s.opts.Server.InjectPacket(cl, pk); err != nil {
			return storage.SystemInfo{}, fmt.Errorf("mqtt sessions: replay %d: %w", m.Seq, err)
		}
		n++
	}
	if n > 0 {
		s.log.Info("mqtt sessions: broker messages not known to be queued for persistent sessions before the restart delivered again (duplicates possible)", "messages", n, "after_seq", w)
	}
	s.mu.Lock()
	s.ready = true
	s.lastTap = max(s.lastTap, last)
	// Messages up to last were replayed: stop tracking them.
	i := 0
	for i < len(s.pending) && s.pending[i].seq <= last {
		i++
	}
	s.pending = s.pending[i:]
	for k, l := range s.byKey {
		j := 0
		for j < len(l) && l[j] <= last {
			j++
		}
		if j == len(l) {
			delete(s.byKey, k)
		} else {
			s.byKey[k] = l[j:]
		}
	}
	s.ops = append(s.ops, sessOp{}) // a commit writes the watermark
	s.cond.Signal()
	s.mu.Unlock()
	return storage.SystemInfo{}, nil
}

// advancePacketIDs moves a restored session's packet identifier counter
// (which starts at 0 in a new process) past its queued messages, so that
// messages queued after the restart get identifiers after them: the order
// of identifiers on their circle is the queue's order (mochi hands them out
// increasing and wrapping, and broker/mqttquic resends a queue in that
// order).
func advancePacketIDs(cl *mqtt.Client) {
	var ids []int
	for _, pk := range cl.State.Inflight.GetAll(false) {
		ids = append(ids, int(pk.PacketID))
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	// The last identifier in circle order precedes the widest gap.
	last, gap := ids[len(ids)-1], ids[0]+65536-ids[len(ids)-1]
	for i := 1; i < len(ids); i++ {
		if g := ids[i] - ids[i-1]; g > gap {
			last, gap = ids[i-1], g
		}
	}
	for range 65536 {
		id, err := cl.NextPacketID()
		if err != nil || int(id) > last {
			return
		}
	}
}

func keyOf(topic string, payload []byte) msgKey {
	return msgKey{topic: topic, data: unsafe.SliceData(payload), n: len(payload)}
}

// tap tracks a broker message until mochi has fanned it out.
func (s *Sessions) tap(m *space.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastTap = m.Seq
	if m.QoS == 0 {
		return
	}
	if len(s.pending) >= maxPending {
		old := s.pending[0]
		s.floor = min(s.floor, old.seq-1)
		s.unindex(old.key, old.seq)
		s.pending = s.pending[1:]
	}
	k := keyOf(m.Topic, m.Payload)
	s.pending = append(s.pending, pendingMsg{seq: m.Seq, key: k})
	s.byKey[k] = append(s.byKey[k], m.Seq)
}

// unindex removes seq from byKey[k]. s.mu held.
func (s *Sessions) unindex(k msgKey, seq uint64) {
	l := s.byKey[k]
	for i, v := range l {
		if v == seq {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(s.byKey, k)
	} else {
		s.byKey[k] = l
	}
}

// OnPublished marks a broker message as fanned out (its OnQosPublish calls
// have run).
func (s *Sessions) OnPublished(_ *mqtt.Client, pk packets.Packet) {
	if pk.FixedHeader.Qos == 0 {
		return
	}
	k := keyOf(pk.TopicName, pk.Payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.byKey[k]
	if len(l) == 0 {
		return
	}
	seq := l[0]
	if len(l) == 1 {
		delete(s.byKey, k)
	} else {
		s.byKey[k] = l[1:]
	}
	for i := range s.pending {
		if s.pending[i].seq == seq {
			s.pending[i].done = true
			break
		}
	}
	for len(s.pending) > 0 && s.pending[0].done {
		s.pending[0] = pendingMsg{}
		s.pending = s.pending[1:]
	}
}

// currentWatermark is the sequence number up to which every QoS 1 broker
// message has been fanned out into mochi. s.mu held.
func (s *Sessions) currentWatermark() uint64 {
	if !s.ready {
		return s.watermark
	}
	w := s.lastTap
	if len(s.pending) > 0 {
		w = s.pending[0].seq - 1
	}
	return max(s.watermark, min(w, s.floor))
}

func (s *Sessions) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.ops) == 0 && !s.closing {
			s.cond.Wait()
		}
		if len(s.ops) == 0 && s.closing {
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if d := s.opts.CommitDelay; d > 0 {
			time.Sleep(d)
		}
		s.mu.Lock()
		ops := s.ops
		s.ops = nil
		w := s.currentWatermark()
		s.mu.Unlock()
		if err := s.write(ops, w); err != nil {
			s.log.Error("mqtt sessions: couldn't commit", "ops", len(ops), "error", err)
			continue
		}
		s.mu.Lock()
		s.watermark = w
		s.mu.Unlock()
	}
}

func (s *Sessions) write(ops []sessOp, w uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		for _, op := range ops {
			var err error
			switch {
			case op.key == nil:
			case op.pfx:
				var keys [][]byte
				c := b.Cursor()
				for k, _ := c.Seek(op.key); k != nil && bytes.HasPrefix(k, op.key); k, _ = c.Next() {
					keys = append(keys, append([]byte(nil), k...))
				}
				for _, k := range keys {
					if err = b.Delete(k); err != nil {
						break
					}
				}
			case op.val == nil:
				err = b.Delete(op.key)
			default:
				err = b.Put(op.key, op.val)
			}
			if err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyWatermark, u64(w))
	})
}

func (s *Sessions) iter(prefix string, fn func(v []byte) error) (err error) {
	defer faultsPanic()()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, s.db.Path(), r)
		}
	}()
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSessions).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			if err := fn(v); err != nil {
				return fmt.Errorf("%w: %s: record %q: %v", ErrCorrupt, s.db.Path(), k, err)
			}
		}
		return nil
	})
}

// Stop commits what is queued and closes the file (mochi calls it from
// Server.Close).
func (s *Sessions) Stop() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
	// The last commit's watermark may trail the fan-out that finished
	// after it (OnPublished queues no commit of its own): write the final
	// one, so a clean restart delivers nothing twice.
	s.mu.Lock()
	w := s.currentWatermark()
	changed := w != s.watermark
	s.mu.Unlock()
	if changed {
		if err := s.write(nil, w); err != nil {
			s.log.Error("mqtt sessions: couldn't commit the final watermark (messages after it are delivered again at the next start)", "error", err)
		}
	}
	return s.db.Close()
}
