#!/bin/bash
# apache-conf.sh DIR MPM PORT DOCROOT: Apache httpd as Debian ships it, for
# the tests and benchmarks: /etc/apache2 copied to DIR/etc with only the
# port (127.0.0.1:PORT, no 443), one site serving DOCROOT, the run, lock
# and log directories under DIR, and MPM (event, Debian's default, or
# prefork) the one enabled.  Also MaxKeepAliveRequests 0 (Debian's 100 ends
# each keep-alive connection after 100 requests, and a benchmark client
# counts the resets of those that close under a request already sent).
# Run it with: (. DIR/etc/envvars.fs && apache2 -d DIR/etc -f DIR/etc/apache2.conf -k start)
set -eu
dir=$1 mpm=$2 port=$3 root=$4
[ -f /etc/apache2/apache2.conf ] && [ -f "/etc/apache2/mods-available/mpm_$mpm.load" ] ||
  { echo "apache-conf: no Debian /etc/apache2 with mpm_$mpm" >&2; exit 1; }
mkdir -p "$dir"
rm -rf "$dir/etc" "$dir/run" "$dir/log"
cp -a /etc/apache2 "$dir/etc"
mkdir -p "$dir/run" "$dir/log"
chown www-data "$dir/log"
sed -i "s/^Listen 80\$/Listen 127.0.0.1:$port/" "$dir/etc/ports.conf"
sed -i "/^<IfModule/,/^<\/IfModule>/d" "$dir/etc/ports.conf"
rm -f "$dir"/etc/sites-enabled/*
cat >"$dir/etc/sites-enabled/fs.conf" <<CONF
<VirtualHost 127.0.0.1:$port>
	DocumentRoot $root
	ServerName localhost
</VirtualHost>
<Directory $root/>
	Require all granted
</Directory>
ServerName localhost
MaxKeepAliveRequests 0
CONF
rm -f "$dir"/etc/mods-enabled/mpm_*
ln -s "../mods-available/mpm_$mpm.load" "$dir/etc/mods-enabled/"
[ ! -f "/etc/apache2/mods-available/mpm_$mpm.conf" ] || ln -s "../mods-available/mpm_$mpm.conf" "$dir/etc/mods-enabled/"
cat >"$dir/etc/envvars.fs" <<ENV
export APACHE_RUN_USER=www-data APACHE_RUN_GROUP=www-data APACHE_PID_FILE=$dir/run/apache2.pid
export APACHE_RUN_DIR=$dir/run APACHE_LOCK_DIR=$dir/run APACHE_LOG_DIR=$dir/log LANG=C
ENV
