/* oneshot: a one-shot TCP client, the process bench/start-cost.sh starts
 * to time what a client's first socket costs (redis-cli, psql -c, curl):
 * connect to 127.0.0.1:PORT, send 5 bytes, close, exit.  Any listener that
 * accepts will do, e.g.
 *   python3 -c 'import socket; s = socket.create_server(("127.0.0.1", 7801), backlog=512)
 *   while True: s.accept()[0].close()' &
 *   bench/start-cost.sh OLD.so,NEW.so 2000 build/bench/oneshot 7801
 * Exit status 1 if the connection failed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  if (argc != 2)
    return 2;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])) };
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0 || write(s, "hello", 5) != 5)
    return 1;
  close(s);
  return 0;
}
