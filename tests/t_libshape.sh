#!/bin/bash
# t_libshape: what loading libfabsock costs a process that never opens a
# socket (shell scripts, build tools: issue 16 asks 0.1 ms a start at most).
# In a firecracker guest every page a start touches for the first time is a
# fault of 25-40 us, so the library's shape is checked on the built file:
#   1. its file-backed data (relocated pointers, GOT, .data) spans at most
#      two pages: the loader writes both anyway, and it zeroes the rest of
#      the page where the file's data ends (a 6 KiB .data once put that end
#      on a third page, one fault more at every start).  .data holds the
#      state a first socket call touches (FS_HOT, base/hot.h): that is what
#      keeps it off .bss pages of its own;
#   2. every constructor and destructor, and DT_FINI, is on _init's page of
#      code (the compiler's .text.startup/.text.exit), which the loader's
#      call of _init faults in anyway (crti's _fini, at the end of .text,
#      was a fault at every exit);
#   3. it needs libc.so.6 alone: no __tls_get_addr (a thread-local not
#      initial-exec), which brought ld-linux-x86-64.so.2 in as a NEEDED
#      object for each preloaded exec to look up and version-check;
#   4. run under it, a program that never makes a socket touches no page of
#      its .bss, and a one-shot client (socket, connect, send, recv, close)
#      two: its fd's table entry and the stat table's bitmap (each such
#      page a fault of 10-14 us here; they were 3 and 8, tests/progs/bsspages);
#   5. the code a forked child runs on its way to exec or _exit (FS_FORK_TEXT,
#      base/hot.h) is in one output section of at most 8 KiB: a child has
#      no page of the library's code mapped, and this path spread over .text
#      was four faults in every child of a preloaded shell;
#   6. the code a one-shot client runs from its first socket() to its exit
#      is in the 64 KiB from _init's page (preload/layout.ld): each 64 KiB
#      window of code is a fault (the kernel's fault-around), and spread
#      over .text this path took three more than the loader's;
#   7. that client makes no stat file (its table stays in its own memory,
#      base/stat.h: the file was six system calls of its first socket and
#      an unlink at its exit), where a server (a listener) makes one.
# TAP.  FABSOCK_LIB: the library (default .libs/libfabsock.so in the build).
set -u
lib=${FABSOCK_LIB:-${top_builddir:-.}/.libs/libfabsock.so}
echo "1..7"
if [ ! -f "$lib" ] || ! command -v readelf >/dev/null; then
  echo "ok 1 # SKIP no library at $lib or no readelf"
  echo "ok 2 # SKIP no library at $lib or no readelf"
  echo "ok 3 # SKIP no library at $lib or no readelf"
  echo "ok 4 # SKIP no library at $lib or no readelf"
  echo "ok 5 # SKIP no library at $lib or no readelf"
  echo "ok 6 # SKIP no library at $lib or no readelf"
  echo "ok 7 # SKIP no library at $lib or no readelf"
  exit 0
fi
page=4096

# 1. The RW segment's file part: [vaddr, vaddr + filesz).
read -r vaddr filesz < <(readelf -lW "$lib" | awk '$1 == "LOAD" && $7 == "RW" { print $3, $5; exit }')
first=$(( vaddr / page )) last=$(( (vaddr + filesz - 1) / page ))
n=$(( last - first + 1 ))
big=$(nm -S --size-sort "$lib" 2>/dev/null | awk '$3 ~ /^[dD]$/' | tail -n 3 | awk '{ printf "%s (0x%s B) ", $4, $2 }')
if [ "$n" -le 2 ]; then
  echo "ok 1 - the file-backed data spans $n page(s) ($filesz bytes at $vaddr; $(( (last + 1) * page - vaddr - filesz )) bytes to spare for FS_HOT)"
else
  echo "not ok 1 - the file-backed data spans $n pages ($filesz bytes at $vaddr): one fault more per process start"
  echo "# largest initialised objects: $big"
fi

# 2. .init_array and .fini_array entries (RELATIVE relocations: the addend
# is the function) against DT_INIT's page.
init=$(readelf -dW "$lib" | awk '$2 == "(INIT)" { print $3 }')
arrays=$(readelf -SW "$lib" | sed 's/^ *\[ *[0-9]*\]//' | awk '$1 == ".init_array" || $1 == ".fini_array" { print $3, $5 }')
bad= k=0
while read -r off addend; do
  in=0
  while read -r a sz; do
    [ $(( 0x$off >= 0x$a && 0x$off < 0x$a + 0x$sz )) = 1 ] && in=1
  done <<<"$arrays"
  [ $in = 1 ] || continue
  k=$((k + 1))
  [ $(( 0x$addend / page )) = $(( init / page )) ] || bad+="$(nm "$lib" | awk -v a="$addend" '$1 ~ a"$" { print $3 }' | head -n 1)@0x$addend "
done < <(readelf -rW "$lib" | awk '$3 == "R_X86_64_RELATIVE" { print $1, $4 }')
fini=$(readelf -dW "$lib" | awk '$2 == "(FINI)" { print $3 }')
if [ -n "$fini" ] && [ -n "$init" ]; then
  k=$((k + 1))
  [ $(( fini / page )) = $(( init / page )) ] || bad+="DT_FINI@$fini "
fi
if [ -z "$init" ] || [ "$k" = 0 ]; then
  echo "not ok 2 - no DT_INIT or no constructor found (init '$init', $k entries)"
elif [ -z "$bad" ]; then
  echo "ok 2 - $k constructors, destructors and DT_FINI on _init's page"
else
  echo "not ok 2 - off _init's page ($init): $bad"
fi

# 3. What the loader must find for it.
needed=$(readelf -dW "$lib" | awk '$2 == "(NEEDED)" { gsub(/[][]/, "", $5); printf "%s ", $5 }')
tls=$(nm -D --undefined-only "$lib" | awk '$2 ~ /^__tls_get_addr/ { print $2 }')
if [ "$needed" = "libc.so.6 " ] && [ -z "$tls" ]; then
  echo "ok 3 - needs libc.so.6 alone"
else
  echo "not ok 3 - needs ${needed:-nothing}${tls:+, imports $tls (a thread-local not initial-exec)}"
fi

# 4. .bss pages a short program touches (tests/progs/bsspages).
prog=${top_builddir:-.}/tests/progs/bsspages
if [ ! -x "$prog" ]; then
  echo "ok 4 # SKIP no $prog (make check builds it)"
else
  none=$(LD_PRELOAD=$lib "$prog" none libfabsock.so | awk '$1 == "bss_kb" { print $2 }')
  client=$(LD_PRELOAD=$lib "$prog" client libfabsock.so | awk '$1 == "bss_kb" { print $2 }')
  if [ "$none" = -1 ] || [ "$client" = -1 ] || [ -z "$none$client" ]; then
    echo "ok 4 # SKIP cannot read /proc/self/pagemap here (none '$none', client '$client')"
  elif [ "$none" -eq 0 ] && [ "$client" -le 8 ]; then
    echo "ok 4 - .bss touched: $none KiB by a program without sockets, $client KiB by a one-shot client"
  else
    echo "not ok 4 - .bss touched: $none KiB by a program without sockets (0 expected), $client KiB by a one-shot client (8 at most): state a first call touches belongs in FS_HOT (base/hot.h)"
  fi
fi

# 5. The fork path's functions, each inside .text.fs_fork.
read -r faddr fsize < <(readelf -SW "$lib" | sed 's/^ *\[ *[0-9]*\]//' | awk '$1 == ".text.fs_fork" { print $3, $5 }')
if [ -z "${faddr:-}" ]; then
  echo "not ok 5 - no .text.fs_fork section (preload/layout.ld not linked in)"
else
  out=
  for f in fork execve _exit fs_fork_child fs_sock_after_fork fs_sock_before_exec fs_agent_after_fork \
    fs_conn_pool_fork_child fs_wake_fork_child fs_aside_atfork_child fs_fdtab_foreach fs_exit_quick; do
    a=$(nm "$lib" | awk -v f="$f" '$3 == f && $2 ~ /^[tT]$/ { print $1; exit }')
    if [ -z "$a" ]; then
      out+="$f(missing) "
    elif [ $(( 0x$a < 0x$faddr || 0x$a >= 0x$faddr + 0x$fsize )) = 1 ]; then
      out+="$f@0x$a "
    fi
  done
  if [ -n "$out" ]; then
    echo "not ok 5 - outside .text.fs_fork (0x$faddr, 0x$fsize bytes): $out"
  elif [ $(( 0x$fsize > 8192 )) = 1 ]; then
    echo "not ok 5 - .text.fs_fork is 0x$fsize bytes (8 KiB at most: keep to what such a child runs)"
  else
    echo "ok 5 - a forked child's path in .text.fs_fork ($(( 0x$fsize )) bytes at 0x$faddr)"
  fi
fi

# 6. The code a one-shot client runs from its first socket() to its exit,
# before .text: .text.fs_first and .text.fs_fork, together within 64 KiB
# from _init's page (at most two fault-around windows, one of them the
# loader's), and the functions of that path inside them (a sample of
# preload/layout.ld's list: a build without -ffunction-sections, or a
# renamed function, leaves them in .text).
read -r first_a first_s < <(readelf -SW "$lib" | sed 's/^ *\[ *[0-9]*\]//' | awk '$1 == ".text.fs_first" { print $3, $5 }')
if [ -z "${first_a:-}" ] || [ -z "${faddr:-}" ]; then
  echo "not ok 6 - no .text.fs_first or .text.fs_fork section (preload/layout.ld not linked in)"
else
  end=$(( 0x$first_a + 0x$first_s > 0x$faddr + 0x$fsize ? 0x$first_a + 0x$first_s : 0x$faddr + 0x$fsize ))
  out=
  for f in socket connect read write close fs_sock_created fs_policy_load fs_conffile_load fs_conn_new \
    fs_fdtab_install fs_stat_slot_alloc fs_sock_connect_done fs_sock_send_up fs_sock_recv_up \
    fs_sock_tcp_io fs_door_home_mark_as fs_agent_queue fs_gpu_probe fs_sock_close fs_stat_slot_free fs_stat_shutdown \
    fs_proc_never_threaded; do
    a=$(nm "$lib" | awk -v f="$f" '$3 == f && $2 ~ /^[tT]$/ { print $1; exit }')
    if [ -z "$a" ]; then
      out+="$f(missing) "
    elif [ $(( 0x$a < 0x$first_a || 0x$a >= end )) = 1 ]; then
      out+="$f@0x$a "
    fi
  done
  if [ -n "$out" ]; then
    echo "not ok 6 - a one-shot client's path outside .text.fs_first/.text.fs_fork (0x$first_a-$(printf 0x%x $end)): $out"
  elif [ $(( end - init / page * page > 65536 )) = 1 ]; then
    echo "not ok 6 - _init's page to the end of .text.fs_fork is $(( end - init / page * page )) bytes (64 KiB at most)"
  else
    echo "ok 6 - a one-shot client's path in the $(( end - init / page * page )) bytes from _init's page"
  fi
fi

# 7. The stat file: none for a one-shot client, one for a server.
if [ ! -x "$prog" ]; then
  echo "ok 7 # SKIP no $prog (make check builds it)"
else
  # At the default threshold and with stats on, whatever the caller's.
  plainenv="env -u FABSOCK_UPGRADE_BYTES -u FABSOCK_TRANSPORT -u FABSOCK_STAT -u FABSOCK_DISABLE"
  client=$($plainenv LD_PRELOAD=$lib "$prog" client libfabsock.so | awk '$1 == "stat_file" { print $2 }')
  server=$($plainenv LD_PRELOAD=$lib "$prog" server libfabsock.so | awk '$1 == "stat_file" { print $2 }')
  if [ "$client" = 0 ] && [ "$server" = 1 ]; then
    echo "ok 7 - a one-shot client makes no stat file, a server does"
  else
    echo "not ok 7 - stat file: one-shot client '${client:-?}' (0 expected), server '${server:-?}' (1 expected)"
  fi
fi
