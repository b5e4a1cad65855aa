// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co
// SPDX-FileContributor: mochi-co

package mqtt

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/xid"

	"github.com/mochi-mqtt/server/v2/mempool"
	"github.com/mochi-mqtt/server/v2/packets"
)

// encodeBufs holds the buffers WritePacket encodes packets into, up to
// 16 KiB each. quiot: upstream made a new buffer (and grew it) for every
// packet written, a few hundred bytes of garbage per delivery (QUIOT.md).
var encodeBufs = mempool.NewBuffer(16 << 10)

const (
	defaultKeepalive             uint16 = 10 // the default connection keepalive value in seconds.
	defaultClientProtocolVersion byte   = 4  // the default mqtt protocol version of connecting clients (if somehow unspecified).
	minimumKeepalive             uint16 = 5  // the minimum recommended keepalive - values under with display a warning.
)

var (
	ErrMinimumKeepalive = errors.New("client keepalive is below minimum recommended value and may exhibit connection instability")
)

// ReadFn is the function signature for the function used for reading and processing new packets.
type ReadFn func(*Client, packets.Packet) error

// Clients contains a map of the clients known by the broker.
type Clients struct {
	internal map[string]*Client // clients known by the broker, keyed on client id.
	sync.RWMutex
	gen atomic.Uint64 // quiot: changed by every Add and Delete (deliveries.go)
}

// NewClients returns an instance of Clients.
func NewClients() *Clients {
	return &Clients{
		internal: make(map[string]*Client),
	}
}

// Add adds a new client to the clients map, keyed on client id.
func (cl *Clients) Add(val *Client) {
	cl.Lock()
	defer cl.Unlock()
	cl.internal[val.ID] = val
	cl.gen.Add(1)
}

// GetAll returns all the clients.
func (cl *Clients) GetAll() map[string]*Client {
	cl.RLock()
	defer cl.RUnlock()
	m := make(map[string]*Client, len(cl.internal)) // quiot: sized once rather than grown (QUIOT.md)
	for k, v := range cl.internal {
		m[k] = v
	}
	return m
}

// list returns the clients in a slice, a smaller copy than GetAll's map
// for a pass over every client. quiot: the event loop copied the whole
// client table into a map every second to look for expired in-flight
// messages (QUIOT.md).
func (cl *Clients) list() []*Client {
	cl.RLock()
	defer cl.RUnlock()
	l := make([]*Client, 0, len(cl.internal))
	for _, v := range cl.internal {
		l = append(l, v)
	}
	return l
}

// Get returns the value of a client if it exists.
func (cl *Clients) Get(id string) (*Client, bool) {
	cl.RLock()
	defer cl.RUnlock()
	val, ok := cl.internal[id]
	return val, ok
}

// Len returns the length of the clients map.
func (cl *Clients) Len() int {
	cl.RLock()
	defer cl.RUnlock()
	val := len(cl.internal)
	return val
}

// Delete removes a client from the internal map.
func (cl *Clients) Delete(id string) {
	cl.Lock()
	defer cl.Unlock()
	delete(cl.internal, id)
	cl.gen.Add(1)
}

// GetByListener returns clients matching a listener id.
func (cl *Clients) GetByListener(id string) []*Client {
	cl.RLock()
	defer cl.RUnlock()
	clients := make([]*Client, 0, cl.Len())
	for _, client := range cl.internal {
		if client.Net.Listener == id && !client.Closed() {
			clients = append(clients, client)
		}
	}
	return clients
}

// Client contains information about a client known by the broker.
type Client struct {
	Properties   ClientProperties // client properties
	State        ClientState      // the operational state of the client.
	Net          ClientConnection // network connection state of the client
	ID           string           // the client id.
	ops          *ops             // ops provides a reference to server ops.
	sync.RWMutex                  // mutex
	// HookState is state a hook keeps with the client, so that it need
	// not look the client up in a table of its own on every delivery.
	// One hook of a server may use it, with one concrete type.
	// quiot: added (QUIOT.md, change 15).
	HookState atomic.Value
}

// ClientConnection contains the connection transport and metadata for the client.
type ClientConnection struct {
	Conn      net.Conn        // the net.Conn used to establish the connection
	bconn     *connReader     // a buffered net.Conn for reading packets (quiot: connReader, was a bufio.Reader)
	outbuf    *bytes.Buffer   // a buffer for writing packets
	raw       syscall.RawConn // quiot: Conn's socket, for deliveries written at once (Client.rawConn); nil if it has none
	Remote    string          // the remote address of the client
	Listener  string          // listener id of the client
	Inline    bool            // if true, the client is the built-in 'inline' embedded client
	rawLooked bool            // quiot: raw was looked up (beside Inline: QUIOT.md, change 19)
}

// ClientProperties contains the properties which define the client behaviour.
type ClientProperties struct {
	// props are the client's MQTT 5 properties (from its CONNECT, as the
	// broker changed them), nil while it has none: an MQTT 3.1.1 client
	// has none, and a Properties is 256 bytes. Read them with Props, set
	// them with SetProps or EditProps. quiot: was an inline
	// packets.Properties named Props (QUIOT.md, change 20).
	props atomic.Pointer[packets.Properties]
	// will is the client's last will, nil while it has none (most
	// clients: a Will is 80 bytes). Read it with Will and HasWill, set it
	// with SetWill. quiot: was the inline field Will (QUIOT.md, change 22).
	will            atomic.Pointer[Will]
	Username        []byte
	ProtocolVersion byte
	Clean           bool
}

// noProps are the properties of a client that has none. Nothing writes
// them: Props returns a copy, and the fork's own readers (propsRef) only
// read them.
var noProps packets.Properties

// Props returns a copy of the client's MQTT 5 properties: the zero
// Properties when it has none. quiot: was the field Props (QUIOT.md,
// change 20).
func (p *ClientProperties) Props() packets.Properties {
	return *p.propsRef()
}

// propsRef returns the client's properties, or noProps when it has none.
// The caller must not change what it returns (EditProps does that).
func (p *ClientProperties) propsRef() *packets.Properties {
	if pr := p.props.Load(); pr != nil {
		return pr
	}
	return &noProps
}

// SetProps replaces the client's MQTT 5 properties with a copy of pr;
// zero properties are held as none (no allocation).
func (p *ClientProperties) SetProps(pr packets.Properties) {
	if propsEmpty(&pr) {
		p.props.Store(nil)
		return
	}
	p.props.Store(&pr)
}

// EditProps returns the client's MQTT 5 properties to change in place,
// making them (zero) if the client has none. As with the inline field
// upstream had, a change made while other goroutines read the client
// (a delivery reads TopicAliasMaximum and MaximumPacketSize) is the
// caller's to order.
func (p *ClientProperties) EditProps() *packets.Properties {
	for {
		if pr := p.props.Load(); pr != nil {
			return pr
		}
		if pr := new(packets.Properties); p.props.CompareAndSwap(nil, pr) {
			return pr
		}
	}
}

// Will returns a copy of the client's will: the zero Will when it has
// none. quiot: was the field Will (QUIOT.md, change 22).
func (p *ClientProperties) Will() Will {
	if w := p.will.Load(); w != nil {
		return *w
	}
	return Will{}
}

// HasWill reports whether the client has a will to send (its Flag is 1).
// quiot: upstream read the field's Flag atomically.
func (p *ClientProperties) HasWill() bool {
	w := p.will.Load()
	return w != nil && w.Flag == 1
}

// SetWill replaces the client's will with a copy of w; a zero w is held
// as none (no allocation).
func (p *ClientProperties) SetWill(w Will) {
	if w.Flag == 0 && w.Qos == 0 && !w.Retain && w.WillDelayInterval == 0 &&
		w.TopicName == "" && len(w.Payload) == 0 && len(w.User) == 0 {
		p.will.Store(nil)
		return
	}
	p.will.Store(&w)
}

// willSent marks the client's will as sent (its Flag 0), keeping the
// rest of it, as upstream's atomic store of the Flag did.
func (p *ClientProperties) willSent() {
	if w := p.will.Load(); w != nil && w.Flag != 0 {
		c := *w
		c.Flag = 0
		p.will.Store(&c)
	}
}

// propsEmpty reports whether pr holds no property: every field zero, or
// an empty slice (TestPropsEmptyEveryField sees every field counted).
func propsEmpty(pr *packets.Properties) bool {
	return len(pr.CorrelationData) == 0 && len(pr.SubscriptionIdentifier) == 0 &&
		len(pr.AuthenticationData) == 0 && len(pr.User) == 0 &&
		pr.ContentType == "" && pr.ResponseTopic == "" && pr.AssignedClientID == "" &&
		pr.AuthenticationMethod == "" && pr.ResponseInfo == "" && pr.ServerReference == "" &&
		pr.ReasonString == "" &&
		pr.MessageExpiryInterval == 0 && pr.SessionExpiryInterval == 0 &&
		pr.WillDelayInterval == 0 && pr.MaximumPacketSize == 0 &&
		pr.ServerKeepAlive == 0 && pr.ReceiveMaximum == 0 && pr.TopicAliasMaximum == 0 &&
		pr.TopicAlias == 0 && pr.PayloadFormat == 0 && !pr.PayloadFormatFlag &&
		!pr.SessionExpiryIntervalFlag && !pr.ServerKeepAliveFlag &&
		pr.RequestProblemInfo == 0 && !pr.RequestProblemInfoFlag &&
		pr.RequestResponseInfo == 0 && !pr.TopicAliasFlag &&
		pr.MaximumQos == 0 && !pr.MaximumQosFlag &&
		pr.RetainAvailable == 0 && !pr.RetainAvailableFlag &&
		pr.WildcardSubAvailable == 0 && !pr.WildcardSubAvailableFlag &&
		pr.SubIDAvailable == 0 && !pr.SubIDAvailableFlag &&
		pr.SharedSubAvailable == 0 && !pr.SharedSubAvailableFlag
}

// Will contains the last will and testament details for a client connection.
type Will struct {
	Payload           []byte                 // -
	User              []packets.UserProperty // -
	TopicName         string                 // -
	Flag              uint32                 // 0,1
	WillDelayInterval uint32                 // -
	Qos               byte                   // -
	Retain            bool                   // -
}

// ClientState tracks the state of the client.
type ClientState struct {
	TopicAliases    TopicAliases                  // a map of topic aliases
	stopCause       atomic.Pointer[error]         // reason for stopping (quiot: was an atomic.Value, 8 bytes more: QUIOT.md, change 19)
	Inflight        *Inflight                     // a map of in-flight qos messages
	Subscriptions   *Subscriptions                // a map of the subscription filters a client maintains
	disconnected    atomic.Int64                  // the time the client disconnected in unix time, for calculating expiry (quiot: an atomic.Int64, 8-byte aligned on 32-bit ARM whatever the fields around it: QUIOT.md, change 19)
	outbound        writeQueue                    // queue for pending outbound packets (quiot: writeQueue, was a channel)
	endOnce         sync.Once                     // only end once
	isTakenOver     atomic.Bool                   // used to identify orphaned clients
	Keepalive       uint16                        // the number of seconds the connection can wait (quiot: beside isTakenOver, QUIOT.md, change 19)
	ServerKeepalive bool                          // keepalive was set by the server
	onPoller        bool                          // quiot: the poller is handling a packet of the client (poller.go); read and written by that goroutine only
	packetID        uint32                        // the current highest packetID
	open            openState                     // indicate that the client is open for packet exchange (quiot: was a context.Context and its CancelFunc, 96 bytes of heap: QUIOT.md, change 23)
	outboundQty     int32                         // number of messages currently in the outbound queue
	writing         atomic.Bool                   // quiot: a goroutine is writing the outbound queue (startWriter)
	outboundBytes   atomic.Int64                  // quiot: bytes of the QoS 0 messages in the outbound queue (queuedSize)
	idMu            sync.Mutex                    // quiot: serialises NextPacketID (not the client's write lock)
	room            atomic.Pointer[chan struct{}] // quiot: the writer took a packet from the queue (the retained replay waits on it: retained.go); made by roomChan
	polled          atomic.Pointer[pollState]     // quiot: the client's place in the poll while the poller reads it (poller.go)
}

// openState says whether a client is open for packet exchange, and gives
// a channel closed when it stops (done). quiot: upstream held a
// context.WithCancel and its CancelFunc, 96 bytes of heap with every
// client for a channel only a waiting retained replay asks for; the
// channel is made by the first done (QUIOT.md, change 23). The zero
// openState is not open, as upstream's nil context was not: a Client not
// made by newClient counts as closed.
type openState struct {
	state atomic.Uint32                 // stateNew, stateOpen or stateClosed
	done  atomic.Pointer[chan struct{}] // made by done; &closedChan once stopped
}

// The states of openState.
const (
	stateNew uint32 = iota
	stateOpen
	stateClosed
)

// closedChan is the closed channel done returns once a client has stopped.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// isOpen reports whether the client is open (newClient opened it and it
// has not stopped).
func (o *openState) isOpen() bool { return o.state.Load() == stateOpen }

// doneChan returns a channel closed once the client has stopped (or
// already closed when it has).
func (o *openState) doneChan() <-chan struct{} {
	if p := o.done.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{})
	if o.done.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *o.done.Load()
}

// cancelOpen stops the client for packet exchange: isOpen is false from
// now on and the channel of doneChan, if made, is closed (idempotent).
func (s *ClientState) cancelOpen() {
	s.open.state.Store(stateClosed)
	if p := s.open.done.Swap(&closedChan); p != nil && p != &closedChan {
		close(*p)
	}
}

// newClient returns a new instance of Client. This is almost exclusively used by Server
// for creating new clients, but it lives here because it's not dependent.
func newClient(c net.Conn, o *ops) *Client {
	cl := &Client{
		State: ClientState{
			Inflight:      NewInflights(),
			Subscriptions: NewSubscriptions(),
			TopicAliases:  NewTopicAliases(o.options.Capabilities.TopicAliasMaximum),
			Keepalive:     defaultKeepalive,
			// quiot: one slot more than MaximumClientWritesPending. Upstream's
			// WriteLoop, waiting on the queue, took a packet straight from the
			// sender (as it held one while writing), so a client could have
			// MaximumClientWritesPending+1 packets pending; a writer started on
			// demand holds none until it runs, and the extra slot keeps that
			// bound (QUIOT.md).
			outbound: writeQueue{max: queueMax(o.options.Capabilities.MaximumClientWritesPending)},
		},
		Properties: ClientProperties{
			ProtocolVersion: defaultClientProtocolVersion, // default protocol version
		},
		ops: o,
	}
	cl.State.open.state.Store(stateOpen)

	if c != nil {
		cl.Net = ClientConnection{
			Conn:   c,
			bconn:  newConnReader(c, o.options.ClientNetReadBufferSize),
			Remote: c.RemoteAddr().String(),
		}
	}

	return cl
}

// queueMax is the bound of a client's write queue: one slot more than
// MaximumClientWritesPending (newClient), at most math.MaxInt32.
func queueMax(pending int32) int32 {
	if pending == math.MaxInt32 {
		return math.MaxInt32
	}
	return pending + 1
}

// startWriter starts a goroutine writing the client's outbound queue
// unless one is already draining it. quiot: mochi v2.7.9 ran a WriteLoop
// goroutine for the life of each client, 4-8 KiB of stack while idle; the
// writer now exists only while packets are queued (QUIOT.md).
func (cl *Client) startWriter() {
	if cl.State.writing.CompareAndSwap(false, true) {
		go cl.writeQueued()
	}
}

// writeQueued writes the outbound queue in order until it is empty or the
// client closes, then gives up the writer role. A packet queued after the
// queue was found empty but before the role was given up found the role
// taken and started no writer: the queue is checked again after giving the
// role up, and the role taken back if it is not empty, so no packet is left
// waiting without a writer.
func (cl *Client) writeQueued() {
	for {
		cl.drainOutbound()
		cl.flushPending() // quiot: what a write that did not wait left (writenow.go)
		cl.State.writing.Store(false)
		if cl.State.outbound.len() == 0 || cl.Closed() || !cl.State.writing.CompareAndSwap(false, true) {
			return
		}
	}
}

// drainOutbound writes queued packets until the queue is empty or the
// client closes (as WriteLoop did, a closed client's queue is not written).
func (cl *Client) drainOutbound() {
	for {
		if cl.Closed() {
			return
		}
		pk, ok := cl.State.outbound.pop()
		if !ok {
			return
		}
		if err := cl.WritePacket(*pk); err != nil {
			// TODO : Figure out what to do with error
			cl.ops.log.Debug("failed publishing packet", "error", err, "client", cl.ID, "packet", pk)
		}
		atomic.AddInt32(&cl.State.outboundQty, -1)
		cl.releaseQueued(queuedSize(pk))
		if room := cl.State.room.Load(); room != nil { // quiot: wakes a retained replay waiting for room (retained.go)
			select {
			case *room <- struct{}{}:
			default:
			}
		}
	}
}

// roomChan returns the channel the client's writer signals on each
// time it takes a packet from the queue, making it on first use. quiot:
// only a retained replay that waits for room listens on it, so it is made
// by the first such replay rather than with every client (QUIOT.md,
// change 19); the replay makes it before it looks for room, so a packet
// taken after that look signals it.
func (cl *Client) roomChan() chan struct{} {
	if room := cl.State.room.Load(); room != nil {
		return *room
	}
	room := make(chan struct{}, 1)
	if !cl.State.room.CompareAndSwap(nil, &room) {
		return *cl.State.room.Load()
	}
	return room
}

// queuedSize is what a packet in the outbound queue counts against the
// byte bounds (Capabilities.MaximumClientWritesPendingBytes,
// MaximumWritesPendingBytes): the topic and payload of a QoS 0 PUBLISH.
// QoS 1 and 2 messages count nothing here: they are bounded while in
// flight. quiot: mochi bounded the queue in packets only, so a subscriber
// that stopped reading held up to MaximumClientWritesPending copies of the
// largest packet (QUIOT.md).
func queuedSize(pk *packets.Packet) int64 {
	if pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos > 0 {
		return 0
	}
	return int64(len(pk.TopicName) + len(pk.Payload))
}

// reserveQueued counts n more bytes in the client's outbound queue and in
// the server's, unless that would pass a bound.
func (cl *Client) reserveQueued(n int64) bool {
	if n == 0 {
		return true
	}
	caps := cl.ops.options.Capabilities
	if m := caps.MaximumClientWritesPendingBytes; m > 0 && cl.State.outboundBytes.Load()+n > m {
		return false
	}
	if m := caps.MaximumWritesPendingBytes; m > 0 && atomic.LoadInt64(&cl.ops.info.PendingWriteBytes)+n > m {
		return false
	}
	cl.State.outboundBytes.Add(n)
	atomic.AddInt64(&cl.ops.info.PendingWriteBytes, n)
	return true
}

// releaseQueued gives back n bytes reserved by reserveQueued.
func (cl *Client) releaseQueued(n int64) {
	if n == 0 {
		return
	}
	cl.State.outboundBytes.Add(-n)
	atomic.AddInt64(&cl.ops.info.PendingWriteBytes, -n)
}

// dropQueued empties the outbound queue of a stopped client, giving back
// what its packets count (the writer stops at the close and leaves them).
func (cl *Client) dropQueued() {
	for {
		pk, ok := cl.State.outbound.pop()
		if !ok {
			return
		}
		atomic.AddInt32(&cl.State.outboundQty, -1)
		cl.releaseQueued(queuedSize(pk))
	}
}

// ParseConnect parses the connect parameters and properties for a client.
func (cl *Client) ParseConnect(lid string, pk packets.Packet) {
	cl.Net.Listener = lid

	cl.Properties.ProtocolVersion = pk.ProtocolVersion
	cl.Properties.Username = pk.Connect.Username
	cl.Properties.Clean = pk.Connect.Clean
	props := pk.Properties.Copy(false)

	if props.ReceiveMaximum > cl.ops.options.Capabilities.MaximumInflight { // 3.3.4 Non-normative
		props.ReceiveMaximum = cl.ops.options.Capabilities.MaximumInflight
	}

	if pk.Connect.Keepalive <= minimumKeepalive {
		cl.ops.log.Warn(
			ErrMinimumKeepalive.Error(),
			"client", cl.ID,
			"keepalive", pk.Connect.Keepalive,
			"recommended", minimumKeepalive,
		)
	}

	cl.State.Keepalive = pk.Connect.Keepalive                                              // [MQTT-3.2.2-22]
	cl.State.Inflight.ResetReceiveQuota(int32(cl.ops.options.Capabilities.ReceiveMaximum)) // server receive max per client
	cl.State.Inflight.ResetSendQuota(int32(props.ReceiveMaximum))                          // client receive max
	// quiot: no alias table a client cannot use (QUIOT.md, change 21): none
	// for aliases to a client that takes none (Topic Alias Maximum 0, as
	// every MQTT 3.1.1 client), none from an MQTT 3.1.1 client (its
	// PUBLISH has no properties); Set on nil answers as a maximum of zero.
	cl.State.TopicAliases.Outbound = nil
	if props.TopicAliasMaximum > 0 {
		cl.State.TopicAliases.Outbound = NewOutboundTopicAliases(props.TopicAliasMaximum)
	}
	if pk.ProtocolVersion < 5 {
		cl.State.TopicAliases.Inbound = nil
	}

	cl.ID = pk.Connect.ClientIdentifier
	if cl.ID == "" {
		cl.ID = xid.New().String() // [MQTT-3.1.3-6] [MQTT-3.1.3-7]
		props.AssignedClientID = cl.ID
	}
	// quiot: held behind a pointer, nil when the client sent none (QUIOT.md, change 20).
	cl.Properties.SetProps(props)

	if pk.Connect.WillFlag {
		will := Will{
			Qos:               pk.Connect.WillQos,
			Retain:            pk.Connect.WillRetain,
			Payload:           pk.Connect.WillPayload,
			TopicName:         pk.Connect.WillTopic,
			WillDelayInterval: pk.Connect.WillProperties.WillDelayInterval,
			User:              pk.Connect.WillProperties.User,
		}
		if pk.Properties.SessionExpiryIntervalFlag &&
			pk.Properties.SessionExpiryInterval < pk.Connect.WillProperties.WillDelayInterval {
			will.WillDelayInterval = pk.Properties.SessionExpiryInterval
		}
		if pk.Connect.WillFlag {
			will.Flag = 1 // atomic for checking
		}
		cl.Properties.SetWill(will) // quiot: behind a pointer (QUIOT.md, change 22)
	}
}

// refreshDeadline refreshes the read/write deadline for the net.Conn connection.
func (cl *Client) refreshDeadline(keepalive uint16) {
	var expiry time.Time // nil time can be used to disable deadline if keepalive = 0
	if keepalive > 0 {
		expiry = time.Now().Add(time.Duration(keepalive+(keepalive/2)) * time.Second) // [MQTT-3.1.2-22]
	}

	if cl.Net.Conn != nil {
		_ = cl.Net.Conn.SetDeadline(expiry) // [MQTT-3.1.2-22]
	}
}

// NextPacketID returns the next available (unused) packet id for the client.
// If no unused packet ids are available, an error is returned and the client
// should be disconnected.
//
// quiot: it takes State.idMu, not the client's lock, which a writer holds
// while a write blocks on a client that stopped reading: a QoS 1 delivery
// to that client then held up its publisher, and so every subscriber of
// the publisher's messages, for as long as the connection stayed up
// (QUIOT.md).
func (cl *Client) NextPacketID() (i uint32, err error) {
	cl.State.idMu.Lock()
	defer cl.State.idMu.Unlock()

	i = atomic.LoadUint32(&cl.State.packetID)
	started := i
	overflowed := false
	for {
		if overflowed && i == started {
			return 0, packets.ErrQuotaExceeded
		}

		if i >= cl.ops.options.Capabilities.maximumPacketID {
			overflowed = true
			i = 0
			continue
		}

		i++

		if _, ok := cl.State.Inflight.Get(uint16(i)); !ok {
			atomic.StoreUint32(&cl.State.packetID, i)
			return i, nil
		}
	}
}

// ResendInflightMessages attempts to resend any pending inflight messages to connected clients.
func (cl *Client) ResendInflightMessages(force bool) error {
	if cl.State.Inflight.Len() == 0 {
		return nil
	}

	for _, tk := range cl.State.Inflight.GetAll(false) {
		if tk.FixedHeader.Type == packets.Publish {
			tk.FixedHeader.Dup = true // [MQTT-3.3.1-1] [MQTT-3.3.1-3]
		}

		cl.ops.hooks.OnQosPublish(cl, tk, tk.Created, 0)
		err := cl.WritePacket(tk)
		if err != nil {
			return err
		}

		if tk.FixedHeader.Type == packets.Puback || tk.FixedHeader.Type == packets.Pubcomp {
			if ok := cl.State.Inflight.Delete(tk.PacketID); ok {
				cl.ops.hooks.OnQosComplete(cl, tk)
				atomic.AddInt64(&cl.ops.info.Inflight, -1)
			}
		}
	}

	return nil
}

// takeResendCredit takes the messages a resumed session is about to resend
// (outbound PUBLISH and PUBREL in flight) from the client's send quota:
// they count against its Receive Maximum (MQTT 5 4.9), and upstream reset
// the quota at the reconnect and resent without counting, so it then sent
// Receive Maximum new messages on top. It runs before the client is added
// to Clients, so no delivery to it can take the credit first.
//
// quiot: added (QUIOT.md, change 16).
func (cl *Client) takeResendCredit() {
	rm := int(cl.Properties.propsRef().ReceiveMaximum)
	if rm == 0 {
		return
	}
	n := 0
	for _, pk := range cl.State.Inflight.GetAll(false) {
		if pk.FixedHeader.Type == packets.Publish || pk.FixedHeader.Type == packets.Pubrel {
			n++
		}
	}
	for i := 0; i < n && i < rm; i++ {
		cl.State.Inflight.DecreaseSendQuota()
	}
}

// ClearInflights deletes all inflight messages for the client, e.g. for a disconnected user with a clean session.
func (cl *Client) ClearInflights() {
	for _, tk := range cl.State.Inflight.GetAll(false) {
		if ok := cl.State.Inflight.Delete(tk.PacketID); ok {
			cl.ops.hooks.OnQosDropped(cl, tk)
			atomic.AddInt64(&cl.ops.info.Inflight, -1)
		}
	}
}

// ClearExpiredInflights deletes any inflight messages which have expired.
func (cl *Client) ClearExpiredInflights(now, maximumExpiry int64) []uint16 {
	deleted := []uint16{}
	for _, tk := range cl.State.Inflight.expired(func(tk *packets.Packet) bool {
		expired := tk.ProtocolVersion == 5 && tk.Expiry > 0 && tk.Expiry < now // [MQTT-3.3.2-5]

		// If the maximum message expiry interval is set (greater than 0), and the message
		// retention period exceeds the maximum expiry, the message will be forcibly removed.
		enforced := maximumExpiry > 0 && now-tk.Created > maximumExpiry

		return expired || enforced
	}) {
		if ok := cl.State.Inflight.Delete(tk.PacketID); ok {
			cl.ops.hooks.OnQosDropped(cl, tk)
			atomic.AddInt64(&cl.ops.info.Inflight, -1)
			deleted = append(deleted, tk.PacketID)
		}
	}

	return deleted
}

// Read reads incoming packets from the connected client and transforms them into
// packets to be handled by the packetHandler.
//
// quiot: Read's frame stays on the stack while it waits for the next
// packet; in mochi v2.7.9 it held the packet (1.6 KB of frame). The packet
// is now read and handled in handleNext, which returns before the next wait
// (QUIOT.md), and handleNext runs on a worker goroutine whose stack has
// grown (handoff.go): Read waits for it, so packets are handled one at a
// time and in order, as before.
func (cl *Client) Read(packetHandler ReadFn) error {
	for {
		if cl.Closed() {
			return nil
		}

		cl.refreshDeadline(cl.State.Keepalive)
		var fh packets.FixedHeader
		err := cl.ReadFixedHeader(&fh)
		if err != nil {
			return err
		}

		err = handOffPacket(cl, &fh, packetHandler)
		if err != nil {
			return err
		}
	}
}

// handleNext reads the packet whose fixed header is fh and hands it to
// packetHandler.
//
//go:noinline
func (cl *Client) handleNext(fh *packets.FixedHeader, packetHandler ReadFn) error {
	pk, err := cl.ReadPacket(fh)
	if err != nil {
		return err
	}

	return packetHandler(cl, pk) // Process inbound packet.
}

// Stop instructs the client to shut down all processing goroutines and disconnect.
func (cl *Client) Stop(err error) {
	cl.State.endOnce.Do(func() {

		if cl.Net.Conn != nil {
			_ = cl.Net.Conn.Close() // omit close error
		}

		if err != nil {
			cl.State.stopCause.Store(&err)
		}

		cl.State.cancelOpen()
		cl.dropQueued() // quiot: give back the queue's bytes

		cl.State.disconnected.Store(time.Now().Unix())
		if ps := cl.State.polled.Load(); ps != nil {
			go ps.p.stopped(ps) // quiot: it may rest in the poll (poller.go)
		}
	})
}

// StopCause returns the reason the client connection was stopped, if any.
func (cl *Client) StopCause() error {
	if p := cl.State.stopCause.Load(); p != nil {
		return *p
	}
	return nil
}

// StopTime returns the the time the client disconnected in unix time, else zero.
func (cl *Client) StopTime() int64 {
	return cl.State.disconnected.Load()
}

// Closed returns true if client connection is closed.
func (cl *Client) Closed() bool {
	return !cl.State.open.isOpen()
}

func (cl *Client) IsTakenOver() bool {
	return cl.State.isTakenOver.Load()
}

// ReadFixedHeader reads in the values of the next packet's fixed header.
func (cl *Client) ReadFixedHeader(fh *packets.FixedHeader) error {
	if cl.Net.bconn == nil {
		return ErrConnectionClosed
	}

	b, err := cl.Net.bconn.ReadByte()
	if err != nil {
		return err
	}

	err = fh.Decode(b)
	if err != nil {
		return err
	}

	var bu int
	fh.Remaining, bu, err = packets.DecodeLength(cl.Net.bconn)
	if err != nil {
		return err
	}

	if cl.ops.options.Capabilities.MaximumPacketSize > 0 && uint32(fh.Remaining+1) > cl.ops.options.Capabilities.MaximumPacketSize {
		return packets.ErrPacketTooLarge // [MQTT-3.2.2-15]
	}

	atomic.AddInt64(&cl.ops.info.BytesReceived, int64(bu+1))
	return nil
}

// ReadPacket reads the remaining buffer into an MQTT packet.
func (cl *Client) ReadPacket(fh *packets.FixedHeader) (pk packets.Packet, err error) {
	atomic.AddInt64(&cl.ops.info.PacketsReceived, 1)

	pk.ProtocolVersion = cl.Properties.ProtocolVersion // inherit client protocol version for decoding
	pk.FixedHeader = *fh
	p := make([]byte, pk.FixedHeader.Remaining)
	n, err := io.ReadFull(cl.Net.bconn, p)
	if err != nil {
		return pk, err
	}

	atomic.AddInt64(&cl.ops.info.BytesReceived, int64(n))

	// quiot: p is the packet's own (made above), so it is decoded as it
	// is; upstream decoded a second copy of it, one more allocation and
	// copy of every packet read (QUIOT.md, change 26).
	px := p
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectDecode(px)
	case packets.Disconnect:
		err = pk.DisconnectDecode(px)
	case packets.Connack:
		err = pk.ConnackDecode(px)
	case packets.Publish:
		err = pk.PublishDecode(px)
		if err == nil {
			atomic.AddInt64(&cl.ops.info.MessagesReceived, 1)
		}
	case packets.Puback:
		err = pk.PubackDecode(px)
	case packets.Pubrec:
		err = pk.PubrecDecode(px)
	case packets.Pubrel:
		err = pk.PubrelDecode(px)
	case packets.Pubcomp:
		err = pk.PubcompDecode(px)
	case packets.Subscribe:
		err = pk.SubscribeDecode(px)
	case packets.Suback:
		err = pk.SubackDecode(px)
	case packets.Unsubscribe:
		err = pk.UnsubscribeDecode(px)
	case packets.Unsuback:
		err = pk.UnsubackDecode(px)
	case packets.Pingreq:
	case packets.Pingresp:
	case packets.Auth:
		err = pk.AuthDecode(px)
	default:
		err = fmt.Errorf("invalid packet type; %v", pk.FixedHeader.Type)
	}

	if err != nil {
		return pk, err
	}

	pk, err = cl.ops.hooks.OnPacketRead(cl, pk)
	return
}

// WritePacket encodes and writes a packet to the client.
func (cl *Client) WritePacket(pk packets.Packet) error {
	if cl.Closed() {
		return ErrConnectionClosed
	}

	if cl.Net.Conn == nil {
		return nil
	}

	buf := encodeBufs.Get() // written out or copied below; OnPacketSent's bytes are valid during the call
	defer encodeBufs.Put(buf)
	cl.preparePacket(&pk)
	pk = cl.ops.hooks.OnPacketEncode(cl, pk)
	if err := encodePacket(&pk, buf); err != nil {
		return err
	}

	n, err := func() (int64, error) {
		cl.Lock()
		defer cl.Unlock()
		if cl.State.outbound.len() == 0 {
			if cl.Net.outbuf == nil {
				return cl.writeDirect(buf) // quiot: writenow.go
			}

			// first write to buffer, then flush buffer
			n, _ := cl.Net.outbuf.Write(buf.Bytes()) // will always be successful
			return int64(n), cl.flushOutbuf()
		}

		// there are more writes in the queue
		if cl.Net.outbuf == nil {
			if buf.Len() >= cl.ops.options.ClientNetWriteBufferSize {
				return buf.WriteTo(cl.Net.Conn)
			}
			cl.Net.outbuf = new(bytes.Buffer)
		}

		n, _ := cl.Net.outbuf.Write(buf.Bytes()) // will always be successful
		if cl.Net.outbuf.Len() < cl.ops.options.ClientNetWriteBufferSize {
			return int64(n), nil
		}

		return int64(n), cl.flushOutbuf()
	}()
	if err != nil {
		return err
	}

	atomic.AddInt64(&cl.ops.info.BytesSent, n)
	atomic.AddInt64(&cl.ops.info.PacketsSent, 1)
	if pk.FixedHeader.Type == packets.Publish {
		atomic.AddInt64(&cl.ops.info.MessagesSent, 1)
	}

	cl.ops.hooks.OnPacketSent(cl, pk, buf.Bytes())
	return nil
}

// preparePacket prepares pk for the client: its protocol version, size
// limit and expiry. The OnPacketEncode hooks come next, then
// encodePacket. quiot: split from WritePacket for Client.writeNow
// (QUIOT.md, change 17); the hooks are called by the caller, on its own
// copy of the packet, so that no frame holds two more copies of it.
func (cl *Client) preparePacket(pk *packets.Packet) {
	if pk.Expiry > 0 {
		expiry := pk.Expiry - time.Now().Unix()
		if expiry < 1 {
			expiry = 1
		}
		pk.Properties.MessageExpiryInterval = uint32(expiry) // [MQTT-3.3.2-6]
	}

	pk.ProtocolVersion = cl.Properties.ProtocolVersion
	props := cl.Properties.propsRef()
	if pk.Mods.MaxSize == 0 { // NB we use this statement to embed client packet sizes in tests
		pk.Mods.MaxSize = props.MaximumPacketSize
	}

	if props.RequestProblemInfoFlag && props.RequestProblemInfo == 0x0 {
		pk.Mods.DisallowProblemInfo = true // [MQTT-3.1.2-29] strict, no problem info on any packet if set
	}

	if pk.FixedHeader.Type != packets.Connack || props.RequestResponseInfo == 0x1 || cl.ops.options.Capabilities.Compatibilities.AlwaysReturnResponseInfo {
		pk.Mods.AllowResponseInfo = true // [MQTT-3.1.2-28] we need to know which properties we can encode
	}

}

// encodePacket encodes pk, prepared (preparePacket and the OnPacketEncode
// hooks), into buf, unless it is larger than its size limit.
func encodePacket(pk *packets.Packet, buf *bytes.Buffer) error {
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(buf)
	case packets.Connack:
		err = pk.ConnackEncode(buf)
	case packets.Publish:
		err = pk.PublishEncode(buf)
	case packets.Puback:
		err = pk.PubackEncode(buf)
	case packets.Pubrec:
		err = pk.PubrecEncode(buf)
	case packets.Pubrel:
		err = pk.PubrelEncode(buf)
	case packets.Pubcomp:
		err = pk.PubcompEncode(buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(buf)
	case packets.Suback:
		err = pk.SubackEncode(buf)
	case packets.Unsubscribe:
		err = pk.UnsubscribeEncode(buf)
	case packets.Unsuback:
		err = pk.UnsubackEncode(buf)
	case packets.Pingreq:
		err = pk.PingreqEncode(buf)
	case packets.Pingresp:
		err = pk.PingrespEncode(buf)
	case packets.Disconnect:
		err = pk.DisconnectEncode(buf)
	case packets.Auth:
		err = pk.AuthEncode(buf)
	default:
		err = fmt.Errorf("%w: %v", packets.ErrNoValidPacketAvailable, pk.FixedHeader.Type)
	}
	if err != nil {
		return err
	}

	if pk.Mods.MaxSize > 0 && uint32(buf.Len()) > pk.Mods.MaxSize {
		return packets.ErrPacketTooLarge // [MQTT-3.1.2-24] [MQTT-3.1.2-25]
	}
	return nil
}

func (cl *Client) flushOutbuf() (err error) {
	if cl.Net.outbuf == nil {
		return
	}

	_, err = cl.Net.outbuf.WriteTo(cl.Net.Conn)
	if err == nil {
		cl.Net.outbuf = nil
	}
	return
}
