/* oneshot: a one-shot TCP client, the process bench/start-cost.sh starts
 * to time what a client's first socket costs (redis-cli, psql -c, curl):
 * connect to 127.0.0.1:PORT, send 5 bytes, close, exit.  Any listener that
 * accepts will do, e.g.
 *   python3 -c 'import socket; s = socket.create_server(("127.0.0.1", 7801), backlog=512)
 *   while True: s.accept()[0].close()' &
 *   bench/start-cost.sh OLD.so,NEW.so 2000 build/bench/oneshot 7801
 * With a PATH, an HTTP/1.0 GET of it instead, read to the end (curl's
 * shape: a reply past the 4 KiB upgrade threshold queues an upgrade the
 * process never lives to run), e.g. against nginx with a 4 KiB file:
 *   bench/start-cost.sh OLD.so,NEW.so 2000 build/bench/oneshot 8080 /f4k
 * Exit status 1 if the connection failed (or, with PATH, nothing came). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  if (argc != 2 && argc != 3)
    return 2;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])) };
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
    return 1;
  if (argc == 2) {
    if (write(s, "hello", 5) != 5)
      return 1;
    close(s);
    return 0;
  }
  char buf[65536];
  int n = snprintf(buf, sizeof buf, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", argv[2]);
  if (n <= 0 || (size_t)n >= sizeof buf || write(s, buf, (size_t)n) != n)
    return 1;
  long got = 0;
  ssize_t r;
  while ((r = read(s, buf, sizeof buf)) > 0)
    got += r;
  close(s);
  return got > 0 ? 0 : 1;
}
