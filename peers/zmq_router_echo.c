/* Peer for `berth msg bench --zmq`: a native libzmq ROUTER that echoes every message to the
 * peer that sent it. It receives [identity, payload...] and sends the same frames back with
 * zmq_msg_recv/zmq_msg_send, which hand libzmq's buffers over without a copy, so a DEALER gets
 * its own message. The C twin of zmq_router_echo.py, without Python in the loop.
 *
 * Build: cc -O2 -o zmq-router-echo peers/zmq_router_echo.c -lzmq   (Debian: libzmq3-dev)
 * Usage: zmq-router-echo [--host 127.0.0.1] [--port 9101]   (or the port alone; 0: any free)
 * Prints one line, `zmq-router-echo-c listening on HOST:PORT`, with the real port. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

int main(int argc, char **argv) {
    const char *host = "127.0.0.1", *port = "9101";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host") && i + 1 < argc) host = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < argc) port = argv[++i];
        else if (argv[i][0] != '-') port = argv[i];
        else { fprintf(stderr, "usage: %s [--host H] [--port N | N]\n", argv[0]); return 2; }
    }
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_IO_THREADS, 1);
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);
    /* No high-water mark: the bench bounds what is in flight (its window), and a ROUTER drops
     * messages for a peer whose queue is full rather than blocking. */
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    char endpoint[300], bound[300];
    snprintf(endpoint, sizeof endpoint, "tcp://%s:%s", host, strcmp(port, "0") ? port : "*");
    if (zmq_bind(sock, endpoint) != 0) {
        fprintf(stderr, "cannot bind %s: %s\n", endpoint, zmq_strerror(errno));
        return 1;
    }
    size_t len = sizeof bound;
    zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, bound, &len);
    printf("zmq-router-echo-c listening on %s:%s\n", host, strrchr(bound, ':') + 1);
    fflush(stdout);
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    for (;;) {
        if (zmq_msg_recv(&msg, sock, 0) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        /* A successful send leaves `msg` empty and ready for the next receive. */
        if (zmq_msg_send(&msg, sock, zmq_msg_more(&msg) ? ZMQ_SNDMORE : 0) < 0 && errno != EINTR)
            break;
    }
    fprintf(stderr, "zmq-router-echo-c: %s\n", zmq_strerror(errno));
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return 1;
}
