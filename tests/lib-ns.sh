# lib-ns.sh - sourced after lib-dcr.sh or lib-store.sh by the tests that
# fill a small filesystem of their own.

# mount_namespace: set NS to the unshare(1) options that give this test a
# mount namespace of its own, where it may mount a small tmpfs (-m as
# root, else -rm in a user namespace); skip the test where neither does.
mount_namespace() {
	command -v unshare >/dev/null 2>&1 || skip "unshare(1) is missing"
	NS=
	for _o in -m -rm; do
		unshare $_o sh -c "mount -t tmpfs -o size=1m tmpfs '$T'" 2>/dev/null && { NS=$_o; break; }
	done
	[ -n "$NS" ] || skip "no mount namespace of our own to mount a small filesystem in"
}
