// An HTTP/3 client on quic-go (github.com/quic-go/quic-go/http3), for berth-cli's
// tests/h3_quicgo.rs: a second independent QUIC and HTTP/3 stack against berth's, beside
// aioquic's (tests/h3/client.py), with the same interface:
//
//	go run . HOST PORT CA_PEM < requests.json > responses.json
//
// stdin is a JSON list of requests, sent all at once as concurrent requests of ONE
// connection (quic-go's http3.Transport keeps one connection per authority):
//
//	{"method": "GET", "path": "/", "headers": [["range", "bytes=0-9"]], "body": "text"}
//
// stdout is a JSON list of responses, in the same order:
//
//	{"status": 200, "headers": [[name, value], ...], "length": N, "sha256": hex,
//	 "body": text (the first 64 KiB), "proto": "HTTP/3.0", "error": null or why it failed}
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

const keep = 64 * 1024

type request struct {
	Method  string      `json:"method"`
	Path    string      `json:"path"`
	Headers [][2]string `json:"headers"`
	Body    *string     `json:"body"`
}

type response struct {
	Status  int         `json:"status"`
	Headers [][2]string `json:"headers"`
	Length  int64       `json:"length"`
	Sha256  string      `json:"sha256"`
	Body    string      `json:"body"`
	Proto   string      `json:"proto"`
	Error   *string     `json:"error"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 4 {
		fail("usage: %s HOST PORT CA_PEM < requests.json", os.Args[0])
	}
	host, port, caFile := os.Args[1], os.Args[2], os.Args[3]
	pem, err := os.ReadFile(caFile)
	if err != nil {
		fail("read the CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fail("no certificate in %s", caFile)
	}
	var requests []request
	if err := json.NewDecoder(os.Stdin).Decode(&requests); err != nil {
		fail("read the requests: %v", err)
	}
	transport := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host},
		QUICConfig: &quic.Config{
			MaxIdleTimeout:  30 * time.Second,
			KeepAlivePeriod: 5 * time.Second,
		},
	}
	defer transport.Close()
	client := &http.Client{Transport: transport, Timeout: 120 * time.Second}
	ctx := context.Background()

	out := make([]response, len(requests))
	var wg sync.WaitGroup
	for i, r := range requests {
		wg.Add(1)
		go func(i int, r request) {
			defer wg.Done()
			out[i] = do(ctx, client, host, port, r)
		}(i, r)
	}
	wg.Wait()
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fail("write the responses: %v", err)
	}
}

func do(ctx context.Context, client *http.Client, host, port string, r request) response {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if r.Body != nil {
		body = strings.NewReader(*r.Body)
	}
	url := fmt.Sprintf("https://%s:%s%s", host, port, r.Path)
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return failed(err)
	}
	for _, h := range r.Headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return failed(err)
	}
	defer resp.Body.Close()
	res := response{Status: resp.StatusCode, Proto: resp.Proto, Headers: [][2]string{}}
	for name, values := range resp.Header {
		for _, v := range values {
			res.Headers = append(res.Headers, [2]string{strings.ToLower(name), v})
		}
	}
	if resp.ContentLength >= 0 {
		// Go takes content-length out of Header into ContentLength.
		if _, ok := resp.Header["Content-Length"]; !ok && method != http.MethodHead {
			res.Headers = append(res.Headers, [2]string{"content-length", fmt.Sprint(resp.ContentLength)})
		}
	}
	hash := sha256.New()
	var kept bytes.Buffer
	buf := make([]byte, 256*1024)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			hash.Write(buf[:n])
			res.Length += int64(n)
			if room := keep - kept.Len(); room > 0 {
				kept.Write(buf[:min(n, room)])
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			e := err.Error()
			res.Error = &e
			break
		}
	}
	res.Sha256 = hex.EncodeToString(hash.Sum(nil))
	res.Body = strings.ToValidUTF8(kept.String(), "\uFFFD")
	return res
}

func failed(err error) response {
	e := err.Error()
	return response{Error: &e, Headers: [][2]string{}}
}
