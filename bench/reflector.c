/* The floor for the DNS benchmark: a UDP server that does nothing but send each datagram back
 * with the QR bit set (dnsperf counts it as an answer). No parsing, no lookup, no allocation:
 * what is left is the cost of the kernel's receive and send paths, which every server pays.
 *
 *   cc -O2 -o reflector bench/reflector.c && ./reflector PORT
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("reflector");
        return 1;
    }
    unsigned char buf[4096];
    for (;;) {
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&peer, &len);
        if (n < 12)
            continue;
        buf[2] |= 0x80;
        sendto(fd, buf, n, 0, (struct sockaddr *)&peer, len);
    }
}
