package redisurl

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/freeport"
)

// fakeNode is a cluster node that speaks just enough RESP for a cluster
// client: CLUSTER SLOTS names one master for every slot, and a command is
// answered OK when that master is the node itself, MOVED otherwise
// (COMMAND's table is empty).
type fakeNode struct {
	ln     net.Listener
	mu     sync.Mutex
	master string // host:port owning all the slots
	state  string // CLUSTER INFO's cluster_state; "" is ok
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	n := &fakeNode{ln: ln, master: ln.Addr().String()}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go n.serve(conn)
		}
	}()
	return n
}

func (n *fakeNode) addr() string { return n.ln.Addr().String() }

func (n *fakeNode) setMaster(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.master = addr
}

func (n *fakeNode) serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		n.mu.Lock()
		master := n.master
		n.mu.Unlock()
		var reply string
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "PING":
			reply = "+PONG\r\n"
		case "COMMAND":
			reply = "*0\r\n"
		case "CLUSTER":
			if len(args) > 1 && strings.EqualFold(args[1], "INFO") {
				state := n.state
				if state == "" {
					state = "ok"
				}
				info := "cluster_state:" + state + "\r\ncluster_slots_assigned:16384\r\n"
				reply = fmt.Sprintf("$%d\r\n%s\r\n", len(info), info)
				break
			}
			host, port, _ := net.SplitHostPort(master)
			reply = fmt.Sprintf("*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$%d\r\n%s\r\n:%s\r\n$40\r\n%040d\r\n",
				len(host), host, port, 1)
		default:
			if master == n.addr() {
				reply = "+OK\r\n"
			} else {
				reply = "-MOVED 0 " + master + "\r\n"
			}
		}
		if _, err := conn.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	count, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || count < 1 {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	args := make([]string, count)
	for i := range args {
		if _, err := r.ReadString('\n'); err != nil { // $<len>
			return nil, err
		}
		arg, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		args[i] = strings.TrimSuffix(arg, "\r\n")
	}
	return args, nil
}

// A master dies and its replica takes over: the cluster's map now names the
// replica, but the dead master sends no MOVED. The client must find the new
// master as soon as the map says so, not at its next periodic reload a
// minute later.
func TestClusterClientFollowsFailover(t *testing.T) {
	replica := newFakeNode(t)
	port, err := freeport.Take()
	require.NoError(t, err)
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) // nothing listens: the killed master
	replica.setMaster(dead)

	c, err := New("redis://"+replica.addr()+"?addr="+replica.addr(), Defaults{DialTimeout: time.Second, MaxRetries: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	ctx := context.Background()
	// go-redis dials a dead node a few times before it gives up; a caller's
	// deadline ends that sooner, as the origin's do.
	down, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.Error(t, c.Set(down, "{evt:1}remaining", 1, 0).Err(), "the master is down and its replica not promoted yet")

	replica.setMaster(replica.addr()) // the failover
	require.Eventually(t, func() bool {
		return c.Set(ctx, "{evt:1}remaining", 1, 0).Err() == nil
	}, 5*time.Second, 50*time.Millisecond, "commands still go to the dead master after the failover")
}

// TestPingSeesTheClusterDown: a master died and no replica took its slots
// over. On a real cluster the client's own PING goes to any live node and
// passes, though every command of the dead master's slots fails; Ping does
// not pass until every master answers and the cluster serves every slot.
func TestPingSeesTheClusterDown(t *testing.T) {
	live := newFakeNode(t)
	port, err := freeport.Take()
	require.NoError(t, err)
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	live.setMaster(dead)

	c, err := New("redis://"+live.addr()+"?addr="+live.addr(), Defaults{DialTimeout: time.Second, MaxRetries: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	// go-redis dials a dead node a few times before it gives up; a
	// probe's deadline ends that sooner, as an orchestrator's does.
	down, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()

	err = Ping(down, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), dead, "names the master that does not answer")

	live.setMaster(live.addr())
	c.(*redis.ClusterClient).ReloadState(ctx)
	require.Eventually(t, func() bool { return Ping(ctx, c) == nil }, 10*time.Second, 20*time.Millisecond)

	live.mu.Lock()
	live.state = "fail"
	live.mu.Unlock()
	require.ErrorContains(t, Ping(ctx, c), "cluster state fail")
}
