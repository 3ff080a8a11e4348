"""Groups a `perf report --sort sym --stdio` of the server into where its cycles go: AEAD and
header protection (ring's AES-GCM/ChaCha and their key schedules), QUIC (quinn-proto), HTTP/3
and QPACK or HTTP/2 and HPACK (berth-proto), TLS records (rustls), system calls and the kernel's
UDP/TCP paths, memory (malloc, memcpy, memset), and the rest.

    python3 perf-groups.py PERF_REPORT.txt
"""
import re, sys, collections

GROUPS = [
    ("AEAD + header protection (ring)", r"aes_|gcm|chacha|poly1305|ring::|ring_core|GFp|aesni|ghash|_hw_"),
    ("QUIC (quinn-proto)", r"quinn_proto"),
    ("UDP I/O (quinn-udp)", r"quinn_udp"),
    ("TLS records (rustls)", r"rustls"),
    ("HTTP/3 + QPACK (berth-proto h3)", r"berth_proto::h3"),
    ("HTTP/2 + HPACK (berth-proto h2)", r"berth_proto::h2"),
    ("exchange, HTTP (berth-proto http)", r"berth_proto::"),
    ("driver (berth)", r"berth::"),
    ("memory (malloc, memcpy, memset)", r"malloc|free|memcpy|memmove|memset|realloc|_int_|cfree|__libc_calloc"),
    ("kernel: UDP", r"udp|ip_|__ip|skb|dev_|net_rx|netif|loopback|gso|gro"),
    ("kernel: TCP", r"tcp_|sock_|inet_"),
    ("kernel: epoll, syscalls, scheduler", r"epoll|syscall|entry_|do_sys|schedule|ep_|__x64|_raw_spin|fput|fdget"),
]

def main(path):
    shares = collections.Counter()
    total = 0.0
    for line in open(path):
        m = re.match(r"\s+([\d.]+)%\s+\[[.k]\]\s+(.*)", line)
        if not m:
            continue
        pct, sym = float(m.group(1)), m.group(2)
        total += pct
        for name, rx in GROUPS:
            if re.search(rx, sym):
                shares[name] += pct
                break
        else:
            shares["other"] += pct
    for name, pct in shares.most_common():
        print(f"{pct:6.1f}%  {name}")
    print(f"{total:6.1f}%  listed (symbols over 0.2% each)")

main(sys.argv[1])
