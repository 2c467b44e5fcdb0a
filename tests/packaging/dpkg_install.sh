#!/bin/sh
# Installs kiln's packages with dpkg into an overlay of this host's root and prints what their
# maintainer scripts did, for packaging_test. Run as root in a mount namespace of its own
# (unshare --mount --propagation private): every write lands in DIR/upper, never on the host.
#   dpkg_install.sh DIR DEB...
set -e
dir=$1
shift
root=$dir/merged
mkdir -p "$dir/upper" "$dir/work" "$root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$dir/upper,workdir=$dir/work" "$root"
mount --bind /proc "$root/proc"
mount --bind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
cp "$@" "$root/tmp/"
debs=
daemons=
for deb in "$@"; do
  debs="$debs /tmp/${deb##*/}"
  case ${deb##*/} in kiln-coordinator_* | kiln-agent_*) daemons="$daemons /tmp/${deb##*/}" ;; esac
done
in_root() { chroot "$root" "$@"; }
wanted() { ls "$root/etc/systemd/system/multi-user.target.wants/" | grep kiln | tr '\n' ' '; }

in_root dpkg -i $debs >/dev/null
echo "user: $(in_root getent passwd kiln | cut -d: -f1,6,7)"
for file in coordinator.key qualifier.key agent.key coordinator.pub; do
  echo "$file: $(in_root stat -c '%U %a' "/etc/kiln/$file")"
done
for state in coordinator qualifier qualifier/golden agent; do
  echo "$state: $(in_root stat -c '%U %a' "/var/lib/kiln/$state")"
done
echo "enabled: $(wanted)"
# The coordinator as its unit runs it: as kiln, which reads its key and writes its database's folder.
in_root setpriv --reuid=kiln --regid=kiln --init-groups kiln-coordinator check-config >/dev/null 2>&1 &&
  echo "coordinator check-config as kiln: ok"
# The agent's unit makes /run/kiln (RuntimeDirectory=) for its local socket.
mkdir -p "$root/run/kiln"
in_root kiln-agent check-config >/dev/null 2>&1 && echo "agent check-config: ok"

# Installed again (an upgrade's path): the keys stay, an edited conffile stays.
key=$(cat "$root/etc/kiln/coordinator.pub")
echo "# edited by the operator" >> "$root/etc/kiln/agent.toml"
in_root dpkg -i --force-confold $daemons >/dev/null
[ "$(cat "$root/etc/kiln/coordinator.pub")" = "$key" ] && echo "key kept on reinstall"
tail -1 "$root/etc/kiln/agent.toml"

in_root dpkg --purge kiln-agent kiln-coordinator >/dev/null
[ ! -e "$root/etc/kiln" ] && [ ! -e "$root/var/lib/kiln" ] && echo "purge removed /etc/kiln and /var/lib/kiln"
echo "enabled after purge: $(wanted)"
echo "user after purge: $(in_root getent passwd kiln | cut -d: -f1)"
