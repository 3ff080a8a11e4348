// h3load is a small HTTP/3 load generator on quic-go (github.com/quic-go/quic-go/http3),
// for comparing berth's HTTP/3 with other servers' (BENCHMARKS.md, issue 42 "Speed"):
//
//	h3load -c CONNS -m STREAMS -n REQUESTS [-d DURATION] (-insecure | -ca CA.pem) URL
//
// It opens CONNS QUIC connections (one http3.Transport each, so one connection each) and on
// each keeps STREAMS requests in flight (STREAMS goroutines sharing the connection), until
// REQUESTS requests have been started in all or DURATION has passed, whichever comes first.
// Each response body is read to its end. A request fails if it errors, its status is not
// 200 or its body cannot be read to the end; failures are counted and printed, never hidden,
// and the exit status is 1 if there was any. It prints one summary block:
//
//	requests N  failures F  bytes B  elapsed S  req/s R  MB/s M
//	load cpu S (user U, system Y)
//
// The second line is this program's own CPU time over its whole life (getrusage), to show
// whether the load generator, not the server, was the limit (a whole core: elapsed seconds).
//
// The connections are set up (one request each, not counted) before the clock starts, so the
// figures are of requests on open connections; the server's CPU for those handshakes is in
// whatever the caller measures around the whole process.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func main() {
	conns := flag.Int("c", 1, "connections")
	streams := flag.Int("m", 1, "concurrent requests (streams) per connection")
	total := flag.Int64("n", 1000, "total requests (0: no limit, use -d)")
	dur := flag.Duration("d", 0, "stop after this long (0: no limit, use -n)")
	insecure := flag.Bool("insecure", false, "do not verify the server's certificate")
	caFile := flag.String("ca", "", "CA certificate (PEM) to verify the server against")
	flag.Parse()
	if flag.NArg() != 1 || (*total <= 0 && *dur <= 0) {
		fmt.Fprintln(os.Stderr, "usage: h3load -c N -m N -n N [-d D] (-insecure | -ca CA.pem) URL")
		os.Exit(2)
	}
	target := flag.Arg(0)
	u, err := url.Parse(target)
	if err != nil {
		fatal("bad URL: %v", err)
	}
	tlsConf := &tls.Config{ServerName: u.Hostname(), InsecureSkipVerify: *insecure}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fatal("read the CA: %v", err)
		}
		tlsConf.RootCAs = x509.NewCertPool()
		if !tlsConf.RootCAs.AppendCertsFromPEM(pem) {
			fatal("no certificate in %s", *caFile)
		}
	}

	// One client per connection: http3.Transport keeps one QUIC connection per authority.
	clients := make([]*http.Client, *conns)
	for i := range clients {
		tr := &http3.Transport{
			TLSClientConfig: tlsConf.Clone(),
			QUICConfig:      &quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 5 * time.Second},
		}
		defer tr.Close()
		clients[i] = &http.Client{Transport: tr, Timeout: 60 * time.Second}
		// Warm-up: open the connection (handshake) before the clock starts.
		if _, _, err := fetch(clients[i], target); err != nil {
			fatal("connection %d: first request failed: %v", i, err)
		}
	}

	var started, done, failures, bytes atomic.Int64
	var firstErr atomic.Value
	ctx := context.Background()
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for _, client := range clients {
		for s := 0; s < *streams; s++ {
			wg.Add(1)
			go func(client *http.Client) {
				defer wg.Done()
				for ctx.Err() == nil {
					if *total > 0 && started.Add(1) > *total {
						return
					}
					n, status, err := fetch(client, target)
					bytes.Add(n)
					done.Add(1)
					if err == nil && status != http.StatusOK {
						err = fmt.Errorf("status %d", status)
					}
					if err != nil {
						failures.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
				}
			}(client)
		}
	}
	wg.Wait()
	elapsed := time.Since(begin).Seconds()
	fmt.Printf("requests %d  failures %d  bytes %d  elapsed %.3f  req/s %.1f  MB/s %.2f\n",
		done.Load(), failures.Load(), bytes.Load(), elapsed,
		float64(done.Load())/elapsed, float64(bytes.Load())/elapsed/1e6)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		user, sys := time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
		fmt.Printf("load cpu %.3f (user %.3f, system %.3f)\n",
			(user + sys).Seconds(), user.Seconds(), sys.Seconds())
	}
	if e := firstErr.Load(); e != nil {
		fmt.Printf("first failure: %s\n", e)
		os.Exit(1)
	}
}

// fetch makes one GET and reads the body to its end; it returns the body's length and status.
func fetch(client *http.Client, target string) (int64, int, error) {
	resp, err := client.Get(target)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return n, resp.StatusCode, err
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "h3load: "+format+"\n", args...)
	os.Exit(1)
}
