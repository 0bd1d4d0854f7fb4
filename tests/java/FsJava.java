// FsJava: a Java server and client with the JDK's default sockets, for the
// integration test t_java.sh and the Java rows of bench/run-main.sh.
//
// The JDK opens AF_INET6 dual-stack sockets by default on Linux: a client
// connecting to 127.0.0.1 and a server accepting it both see IPv4-mapped
// addresses (::ffff:127.0.0.1).  Nothing here is tuned for libfabsock.
//
//   java FsJava.java server PORTFILE
//   java FsJava.java pingpong PORT COUNT SIZE [HOLDFILE]
//   java FsJava.java sink PORT MIB WRITE_BYTES [HOLDFILE]
//   java FsJava.java stream PORT MIB WRITE_BYTES
//
// The first byte a client sends picks the service: 'P' echoes fixed-size
// messages back, 'S' reads to EOF (the client's shutdownOutput), then answers
// the SHA-256 of what it read; 'C' does the same but only counts the bytes
// (a throughput figure that is not SHA-256's).  A HOLDFILE makes the client pause halfway,
// with its connection open: it writes HOLDFILE.ready, then waits (30 s at
// most) for HOLDFILE to exist, as the tests/progs clients do.
import java.io.*;
import java.net.*;
import java.nio.file.*;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.HexFormat;

public class FsJava {
  static void hold(String path) throws Exception {
    if (path == null) return;
    Files.writeString(Path.of(path + ".ready"), "ready\n");
    for (int i = 0; i < 3000 && !Files.exists(Path.of(path)); i++) Thread.sleep(10);
  }

  static void readFully(InputStream in, byte[] b, int len) throws IOException {
    for (int off = 0; off < len;) {
      int n = in.read(b, off, len - off);
      if (n < 0) throw new EOFException("EOF after " + off + " of " + len + " bytes");
      off += n;
    }
  }

  static void serve(Socket s) {
    try (s) {
      s.setTcpNoDelay(true);
      InputStream in = s.getInputStream();
      OutputStream out = s.getOutputStream();
      int kind = in.read();
      if (kind == 'P') {
        byte[] sz = new byte[4];
        readFully(in, sz, 4);
        int size = ((sz[0] & 255) << 24) | ((sz[1] & 255) << 16) | ((sz[2] & 255) << 8) | (sz[3] & 255);
        byte[] b = new byte[size];
        for (;;) {
          int off = 0;
          while (off < size) {
            int n = in.read(b, off, size - off);
            if (n < 0) return;
            off += n;
          }
          out.write(b, 0, size);
        }
      } else if (kind == 'S') {
        MessageDigest md = MessageDigest.getInstance("SHA-256");
        byte[] b = new byte[1 << 20];
        for (int n; (n = in.read(b)) >= 0;) md.update(b, 0, n);
        out.write((HexFormat.of().formatHex(md.digest()) + "\n").getBytes());
      } else if (kind == 'C') {
        byte[] b = new byte[1 << 20];
        long total = 0;
        for (int n; (n = in.read(b)) >= 0;) total += n;
        out.write((total + "\n").getBytes());
      }
    } catch (Exception e) {
      System.err.println("server: " + e);
    }
  }

  public static void main(String[] a) throws Exception {
    switch (a[0]) {
      case "server": {
        ServerSocket ss = new ServerSocket(0, 128);
        Files.writeString(Path.of(a[1] + ".tmp"), ss.getLocalPort() + "\n");
        Files.move(Path.of(a[1] + ".tmp"), Path.of(a[1]), StandardCopyOption.ATOMIC_MOVE);
        System.err.println("server: listening on " + ss.getLocalSocketAddress());
        for (;;) {
          Socket s = ss.accept();
          Thread t = new Thread(() -> serve(s));
          t.setDaemon(true);
          t.start();
        }
      }
      case "pingpong": {
        int port = Integer.parseInt(a[1]), count = Integer.parseInt(a[2]), size = Integer.parseInt(a[3]);
        String holdf = a.length > 4 ? a[4] : null;
        try (Socket s = new Socket("127.0.0.1", port)) {
          s.setTcpNoDelay(true);
          InputStream in = s.getInputStream();
          OutputStream out = s.getOutputStream();
          out.write(new byte[] { 'P', (byte) (size >>> 24), (byte) (size >>> 16), (byte) (size >>> 8), (byte) size });
          byte[] msg = new byte[size], got = new byte[size];
          long[] ns = new long[count];
          for (int i = 0; i < count; i++) {
            if (holdf != null && i == count / 2) hold(holdf);
            Arrays.fill(msg, (byte) i);
            long t0 = System.nanoTime();
            out.write(msg);
            readFully(in, got, size);
            ns[i] = System.nanoTime() - t0;
            if (!Arrays.equals(msg, got)) throw new IOException("round trip " + i + ": echo differs");
          }
          // The first tenth warms the JIT up; the figures are from the rest.
          long[] m = Arrays.copyOfRange(ns, count / 10, count);
          Arrays.sort(m);
          System.out.printf("pingpong %d x %d B: p50 %.2f us p99 %.2f us%n", count, size,
              m[m.length / 2] / 1e3, m[(int) (m.length * 0.99)] / 1e3);
        }
        break;
      }
      case "sink": {
        int port = Integer.parseInt(a[1]);
        long total = Long.parseLong(a[2]) << 20;
        int wsize = Integer.parseInt(a[3]);
        String holdf = a.length > 4 ? a[4] : null;
        MessageDigest md = MessageDigest.getInstance("SHA-256");
        byte[] b = new byte[wsize];
        long seed = 0x9E3779B97F4A7C15L;
        try (Socket s = new Socket("127.0.0.1", port)) {
          InputStream in = s.getInputStream();
          OutputStream out = s.getOutputStream();
          out.write('S');
          long t0 = System.nanoTime();
          for (long sent = 0; sent < total;) {
            if (holdf != null && sent >= total / 2) { hold(holdf); holdf = null; }
            int n = (int) Math.min(wsize, total - sent);
            for (int i = 0; i < n; i += 8) { seed = seed * 6364136223846793005L + 1442695040888963407L; b[i] = (byte) (seed >>> 56); }
            md.update(b, 0, n);
            out.write(b, 0, n);
            sent += n;
          }
          s.shutdownOutput();
          String theirs = new BufferedReader(new InputStreamReader(in)).readLine();
          double secs = (System.nanoTime() - t0) / 1e9;
          String ours = HexFormat.of().formatHex(md.digest());
          System.out.printf("sink %d MiB in %d B writes: %.1f MB/s, sha256 %s%n", total >> 20, wsize,
              total / secs / 1e6, ours.equals(theirs) ? "ok" : "MISMATCH " + ours + " " + theirs);
          if (!ours.equals(theirs)) System.exit(1);
        }
        break;
      }
      case "stream": {
        int port = Integer.parseInt(a[1]);
        long total = Long.parseLong(a[2]) << 20;
        byte[] b = new byte[Integer.parseInt(a[3])];
        Arrays.fill(b, (byte) 'x');
        try (Socket s = new Socket("127.0.0.1", port)) {
          OutputStream out = s.getOutputStream();
          out.write('C');
          long t0 = System.nanoTime();
          for (long sent = 0; sent < total;) {
            int n = (int) Math.min(b.length, total - sent);
            out.write(b, 0, n);
            sent += n;
          }
          s.shutdownOutput();
          String got = new BufferedReader(new InputStreamReader(s.getInputStream())).readLine();
          double secs = (System.nanoTime() - t0) / 1e9;
          boolean ok = String.valueOf(total).equals(got);
          System.out.printf("stream %d MiB in %d B writes: %.1f MB/s, count %s%n", total >> 20, b.length,
              total / secs / 1e6, ok ? "ok" : "MISMATCH " + got);
          if (!ok) System.exit(1);
        }
        break;
      }
      default:
        System.err.println("usage: see the comment at the top of FsJava.java");
        System.exit(2);
    }
  }
}
