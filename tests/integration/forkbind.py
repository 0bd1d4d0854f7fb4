"""forkbind: the children of a process holding TCP connections, each doing
what a PostgreSQL backend does first (t_forkcost.sh): a send on the
inherited connection, an epoll set made and closed, the listener and the
connection closed, then an end, by exit (handlers run) and by _exit.  The
test counts, under LD_DEBUG=bindings, the functions the library binds
lazily in the children: each is a symbol lookup through every library of
the process, in every child of a server that forks per connection.
Prints the parent's pid, then "ok" once both children are done."""
import os
import select
import socket
import sys

lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(4)
cli = socket.create_connection(lst.getsockname())
srv, _ = lst.accept()  # and no send or receive here: the postmaster's
print(os.getpid(), flush=True)
for end in ("exit", "_exit"):
    pid = os.fork()
    if pid == 0:
        srv.sendall(b"y" * 10)
        ep = select.epoll()
        ep.register(srv, select.EPOLLIN)
        ep.poll(0)
        ep.close()
        lst.close()
        srv.close()
        if end == "_exit":
            os._exit(0)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit("child (%s) ended with status %d" % (end, status))
got = b""
while len(got) < 20:
    got += cli.recv(20 - len(got))
print("ok", flush=True)
