// Peer for `berth lab`: Go's net/http (a goroutine per connection on the runtime's netpoller),
// serving the lab's routes.
//
// Usage: go build -o go-peer peers/go_nethttp.go && ./go-peer PORT
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// reverseValues reads a JSON object of strings and returns its values reversed, in the
// object's order (a Go map would lose it, so the object is read token by token).
func reverseValues(body io.Reader) ([]string, error) {
	dec := json.NewDecoder(body)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not an object")
	}
	out := []string{}
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the key
			return nil, err
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, reverse(v))
	}
	return out, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go-peer PORT")
		os.Exit(2)
	}
	// One handler with a switch rather than ServeMux method patterns, which need a go.mod
	// declaring Go 1.22 or later; this file builds on its own.
	handler := func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && (r.URL.Path == "/" || r.URL.Path == "/hello/world"):
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("Hello, World!"))
		case r.Method == "GET" && r.URL.Path == "/test/slow":
			time.Sleep(30 * time.Millisecond) // berth's /test/slow job takes 30 ms
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "0")
		case r.Method == "POST" && r.URL.Path == "/reverse":
			out, err := reverseValues(r.Body)
			if err != nil {
				http.Error(w, "body must be a JSON object of strings", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string][]string{"data": out})
		default:
			http.Error(w, "Endpoint not found", http.StatusNotFound)
		}
	}
	addr := "127.0.0.1:" + os.Args[1]
	fmt.Println("go listening on", addr)
	log.Fatal(http.ListenAndServe(addr, http.HandlerFunc(handler)))
}
