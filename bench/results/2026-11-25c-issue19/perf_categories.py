import sys, re, collections
cats = collections.OrderedDict((k, 0.0) for k in ["user (berth)", "syscall entry/exit", "epoll", "io_uring", "TCP/IP, sockets, skb", "scheduler/wakeups", "other kernel"])
for line in open(sys.argv[1]):
    m = re.match(r"\s+([\d.]+)%\s+\[(.)\]\s+(\S+)", line)
    if not m: continue
    pct, kind, sym = float(m.group(1)), m.group(2), m.group(3)
    if kind == ".": c = "user (berth)"
    elif re.search(r"entry_SYSCALL|do_syscall|syscall_exit|__x64_sys|syscall_return|exit_to_user|fpregs|switch_fpu|__fdget|fget|fput", sym): c = "syscall entry/exit"
    elif re.search(r"^ep_|epoll|ep_poll", sym): c = "epoll"
    elif re.search(r"^io_|^__io_|io_uring|tctx|task_work", sym): c = "io_uring"
    elif re.search(r"tcp|inet|ip_|ipv4|skb|sock|net_|netif|dev_|__dev|bbr|loopback|_copy_to_iter|_copy_from_iter|datagram|sk_|lock_sock|release_sock|dst_|raw_v4|nf_|rps|process_backlog|validate_xmit|__napi|gro", sym): c = "TCP/IP, sockets, skb"
    elif re.search(r"wake|sched|schedule|enqueue|dequeue|update_curr|pick_next|__switch_to|finish_task|raw_spin|ttwu|select_task|psi_", sym): c = "scheduler/wakeups"
    else: c = "other kernel"
    cats[c] += pct
tot = sum(cats.values())
print(" | ".join(f"{k} {v/tot*100:.0f}%" for k, v in cats.items()))
