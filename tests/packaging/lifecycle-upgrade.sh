#!/usr/bin/env bash
# An upgrade from the built version to a newer one (repack-upgrade.sh: its
# /etc/init.d scripts changed, /etc/default/gpu-restriction not), by
# apt-get install ./*.deb with no --force-conf* option, on Debian 12 with
# systemd. It must keep the admin's edit of the conffile
# /etc/default/gpu-restriction (dpkg keeps a conffile only the admin
# changed, without asking) and the admin's /etc/gpu-restriction.conf (no
# package's file), and give the package's new version of each conffile the
# admin left alone.
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/packaging/lifecycle-lib.sh
. "$here/lifecycle-lib.sh"

lifecycle_tree debian
lifecycle_deps "$tools_deb" "$limit_deb"
install_debs "$limit_deb" "$tools_deb"
old=$(dpkg-deb -f "$tools_deb" Version)

edited=/etc/default/gpu-restriction
[[ -f $tree$edited ]] || die "the install left no $edited"
conffiles=$(in_chroot dpkg-query -W -f="\${Conffiles}\n" gpuinit)
grep -q "^ $edited " <<<"$conffiles" ||
  die "$edited is no conffile of the installed gpuinit"
# The admin's edits: a changed setting and a comment.
sed -i 's/^PERSIST=.*/PERSIST=no/' "$tree$edited"
echo "# kept across upgrades (tests/packaging/lifecycle-upgrade.sh)" >>"$tree$edited"
grep -qx 'PERSIST=no' "$tree$edited" || die "$edited has no PERSIST= line to edit"
cp -a "$tree$edited" "$work/edited"
admin=/etc/gpu-restriction.conf
in_chroot dpkg -S "$admin" >/dev/null 2>&1 && die "$admin belongs to a package: it is the admin's own"
# gpu-restriction.conf(5)'s syntax.
printf '# the admin'"'"'s rules\ngpu=*  group=nvidia{minor} mode=0660\n' >"$tree$admin"
chmod 640 "$tree$admin"
cp -a "$tree$admin" "$work/admin"

# apt passes dpkg no --force-conf* option (none configured), and stdin is
# closed (in_chroot): dpkg decides alone only where no question arises.
forced=$(in_chroot apt-config dump | grep -i -e 'Dpkg::Options' -e 'force-conf' || true)
[[ -z $forced ]] || die "the image's apt passes dpkg options: $forced"

"$here/repack-upgrade.sh" "$GPUINIT_DEB_DIR" "$work/new"
new_tools=$(compgen -G "$work/new/gpuinit_*.deb")
new_limit=$(compgen -G "$work/new/gpuinit-libgpulimit_*.deb")
new=$(dpkg-deb -f "$new_tools" Version)
dpkg-deb -x "$new_tools" "$work/new-tree"
dpkg-deb -e "$new_tools" "$work/new-control"
# The conffiles the admin did not edit: each must change in the new
# version, or keeping the old one would pass unseen.
untouched=()
while read -r conffile; do
  [[ $conffile == "$edited" ]] && continue
  untouched+=("$conffile")
  cmp -s "$tree$conffile" "$work/new-tree$conffile" &&
    die "$conffile is the same in $new and $old: the upgrade would not show whether it is replaced"
done <"$work/new-control/conffiles"
((${#untouched[@]})) || die "gpuinit $new has no conffile besides $edited"

install_debs "$new_limit" "$new_tools"

for name in gpuinit gpuinit-libgpulimit; do
  version=$(in_chroot dpkg-query -W -f="\${db:Status-Abbrev}\${Version}" "$name")
  [[ $version == "ii $new" ]] || fail "$name after the upgrade: '$version', want 'ii $new'"
done
cmp "$work/edited" "$tree$edited" >/dev/null ||
  fail "the upgrade replaced the admin's $edited:"$'\n'"$(diff "$work/edited" "$tree$edited")"
cmp "$work/admin" "$tree$admin" >/dev/null || fail "the upgrade changed the admin's $admin"
[[ $(stat -c %a "$tree$admin") == 640 ]] || fail "the upgrade changed the mode of $admin"
for conffile in "${untouched[@]}"; do
  cmp -s "$work/new-tree$conffile" "$tree$conffile" ||
    fail "$conffile, which the admin did not edit, is not $new's after the upgrade"
done
# dpkg set nothing aside (*.dpkg-new, -dist, -old: a question it answered
# alone or an unfinished unpack).
aside=$(cd "$tree" && find etc -name '*.dpkg-*' -o -name '*.ucf-*')
[[ -z $aside ]] || fail "the upgrade left files aside: $aside"
# And its records agree: every file as packaged but the edited conffile.
verify=$(in_chroot dpkg --verify gpuinit gpuinit-libgpulimit || true)
unexpected=$(grep -v " c $edited\$" <<<"$verify" | grep -v '^$' || true)
[[ -z $unexpected ]] || fail "dpkg --verify after the upgrade:"$'\n'"$unexpected"
grep -q " c $edited\$" <<<"$verify" || fail "dpkg --verify does not see the admin's edit of $edited"
finish "upgrade $old -> $new kept $edited as edited and $admin, and replaced ${untouched[*]}"
