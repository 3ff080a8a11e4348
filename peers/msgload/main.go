// msgload: an echo load generator for berth's message protocol, written from
// docs/msg-protocol.md alone with Go's standard library, so that `berth msg bench` can be
// checked against a tool that shares none of its code (bench/msg_agreement.py).
//
// Each connection sends its keyword frame (8-byte little-endian length, then the name),
// expects the message OK, then keeps -w messages in flight: a writer goroutine sends messages
// while it holds window tokens (batching what it can into one write), a reader goroutine reads
// each echo, checks its length and every byte against what was sent, and gives the token back.
// Only echoes verified within the -d window count.
//
// Build: go build -o msgload .   (in peers/msgload)
// Usage: msgload -addr 127.0.0.1:9100 -s 64 -c 200 -d 10s [-w 16] [-json]
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	period     = 8191 // prime: no power-of-two size or chunk lines up with the pattern
	stride     = 977
	chunk      = 64 << 10
	controlBit = uint64(1) << 63
	// Messages above this are written with writev from the pattern, and read into the
	// connection's buffer straight from the socket (bufio passes reads at least its own size).
	direct  = 4096
	readBuf = 32 << 10
)

// table[i] for i < period+chunk: any chunk of a message's bytes is one slice of it.
var table = func() []byte {
	t := make([]byte, period+chunk)
	x := uint32(2463534242)
	for i := 0; i < period; i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		t[i] = byte(x >> 24)
	}
	for i := period; i < len(t); i++ {
		t[i] = t[i-period]
	}
	return t
}()

// expected returns the bytes of message seq from payload offset at, at most n (and chunk).
func expected(seq, at uint64, n int) []byte {
	if n > chunk {
		n = chunk
	}
	start := (at%period + seq%period*stride%period) % period
	return table[start : start+uint64(n)]
}

var (
	messages atomic.Int64
	payload  atomic.Int64
	stopping atomic.Bool
	errMu    sync.Mutex
	errs     = map[string]int{}
)

func fail(kind string) {
	if stopping.Load() {
		return // the run is over: closing connections is not an error
	}
	errMu.Lock()
	errs[kind]++
	errMu.Unlock()
}

func frame(n uint64) []byte {
	var h [8]byte
	binary.LittleEndian.PutUint64(h[:], n)
	return h[:]
}

// handshake sends the keyword and reads the server's answer: nil for OK.
func handshake(c net.Conn, r *bufio.Reader, name string) error {
	if _, err := c.Write(append(frame(uint64(len(name))), name...)); err != nil {
		return err
	}
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(h[:])
	if n&controlBit != 0 {
		p := make([]byte, n&^controlBit)
		io.ReadFull(r, p)
		return fmt.Errorf("refused: %s", p)
	}
	if n != 2 {
		return fmt.Errorf("answer of %d bytes, not OK", n)
	}
	var ok [2]byte
	if _, err := io.ReadFull(r, ok[:]); err != nil || string(ok[:]) != "OK" {
		return errors.New("no OK")
	}
	return nil
}

type conn struct {
	c      net.Conn
	r      *bufio.Reader
	size   uint64
	tokens chan struct{}
}

func (k *conn) write() {
	w := bufio.NewWriterSize(k.c, 64<<10)
	var seq uint64
	send := func() error {
		if k.size > direct {
			// Header and payload in one writev, straight from the pattern table.
			bufs := net.Buffers{frame(k.size)}
			for at := uint64(0); at < k.size; {
				part := expected(seq, at, int(min(k.size-at, chunk)))
				bufs = append(bufs, part)
				at += uint64(len(part))
			}
			seq++
			if err := w.Flush(); err != nil {
				return err
			}
			_, err := bufs.WriteTo(k.c)
			return err
		}
		w.Write(frame(k.size))
		_, err := w.Write(expected(seq, 0, int(k.size)))
		seq++
		return err
	}
	for range k.tokens {
		if send() != nil {
			fail("write")
			return
		}
	batch:
		for {
			select {
			case <-k.tokens:
				if send() != nil {
					fail("write")
					return
				}
			default:
				break batch
			}
		}
		if w.Flush() != nil {
			fail("write")
			return
		}
	}
}

func (k *conn) read() {
	var seq uint64
	buf := make([]byte, chunk)
	for {
		var h [8]byte
		if _, err := io.ReadFull(k.r, h[:]); err != nil {
			fail("read")
			return
		}
		n := binary.LittleEndian.Uint64(h[:])
		if n&controlBit != 0 {
			fail("control-frame")
			return
		}
		if n != k.size {
			fail("wrong-length")
			return
		}
		for at := uint64(0); at < n; {
			part := buf[:min(n-at, chunk)]
			if _, err := io.ReadFull(k.r, part); err != nil {
				fail("read")
				return
			}
			if !bytes.Equal(part, expected(seq, at, len(part))) {
				fail("mismatch")
				return
			}
			at += uint64(len(part))
		}
		seq++
		messages.Add(1)
		payload.Add(int64(n))
		k.tokens <- struct{}{}
	}
}

func parseSize(s string) (uint64, error) {
	mult := map[byte]uint64{'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30}
	s = strings.ToLower(s)
	if m, ok := mult[s[len(s)-1]]; ok && len(s) > 1 {
		n, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
		return n * m, err
	}
	return strconv.ParseUint(s, 10, 64)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9100", "server address (host:port, or tcp://host:port)")
	sizeArg := flag.String("s", "64", "payload bytes per message (64, 1k, 64k, 1m)")
	conns := flag.Int("c", 200, "connections")
	window := flag.Int("w", 0, "messages in flight per connection (default 16 up to 4 KiB, else 1)")
	dur := flag.Duration("d", 10*time.Second, "how long to measure")
	prefix := flag.String("name", "msgload-", "keyword prefix (connection i is PREFIXi)")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Parse()
	size, err := parseSize(*sizeArg)
	if err != nil || *conns < 1 {
		fmt.Fprintln(os.Stderr, "msgload: bad -s or -c")
		os.Exit(2)
	}
	if *window <= 0 {
		*window = 1
		if size <= 4096 {
			*window = 16
		}
	}
	target := strings.TrimPrefix(*addr, "tcp://")

	all := make([]*conn, 0, *conns)
	for i := 0; i < *conns; i++ {
		c, err := net.Dial("tcp", target)
		if err != nil {
			fmt.Fprintf(os.Stderr, "msgload: connect %s: %v\n", target, err)
			os.Exit(1)
		}
		r := bufio.NewReaderSize(c, readBuf)
		if err := handshake(c, r, *prefix+strconv.Itoa(i)); err != nil {
			fmt.Fprintf(os.Stderr, "msgload: handshake: %v\n", err)
			os.Exit(1)
		}
		k := &conn{c: c, r: r, size: size, tokens: make(chan struct{}, *window)}
		for j := 0; j < *window; j++ {
			k.tokens <- struct{}{}
		}
		all = append(all, k)
	}
	start := time.Now()
	for _, k := range all {
		go k.write()
		go k.read()
	}
	time.Sleep(*dur)
	n, b := messages.Load(), payload.Load()
	elapsed := time.Since(start).Seconds()
	stopping.Store(true)
	for _, k := range all {
		k.c.Close()
	}
	errMu.Lock()
	total := 0
	for _, v := range errs {
		total += v
	}
	report := map[string]any{
		"tool": "msgload", "endpoint": target, "size": size, "connections": *conns,
		"window": *window, "elapsed_s": elapsed, "messages": n, "payload_bytes": b,
		"msgs_per_sec": float64(n) / elapsed, "mb_per_sec": float64(b) / elapsed / 1e6,
		"errors": errs, "error_total": total,
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(report)
	} else {
		fmt.Printf("%d messages of %d bytes in %.2f s: %.0f msgs/s, %.1f MB/s, %d errors %v\n",
			n, size, elapsed, float64(n)/elapsed, float64(b)/elapsed/1e6, total, errs)
	}
	if n == 0 {
		os.Exit(1)
	}
}
