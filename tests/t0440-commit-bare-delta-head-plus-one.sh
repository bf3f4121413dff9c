#!/bin/sh
# A receiver commit where nothing names the version (dcr-diff A B |
# dcr-apply R, then a bare dcr-commit R) commits HEAD + 1, or 1 on a
# receiver with no HEAD, and says so; a rerun commits nothing new; a version
# named by the delta's file name or by --version still wins, and a first
# commit may be version 0 when it is named.
. "$DCR_SRC/tests/lib-dcr.sh"
need dcr-commit gen-checkpoint
run 0 gen-checkpoint -q --size 256K --steps 5 "$T/g"
G=$T/g

# head_is R VERSION STATE: R's HEAD names VERSION and STATE
head_is() {
	run 0 dcr-commit --status --porcelain "$1"
	grep -q "^head	$2	$3$" "$T/out" || fail "HEAD of $1 is not $2 $3: $(head -1 "$T/out")"
}
# bare A B R: apply the delta A -> B to R through a pipe, naming no version
bare() {
	run 0 sh -c 'dcr-diff "$1" "$2" | dcr-apply -q "$3"' sh "$1" "$2" "$3"
}

cp -r "$G/v0" "$T/r"
rm -rf "$T/r/.dcr"
bare "$G/v0" "$G/v1" "$T/r"
run 0 dcr-commit "$T/r"
grep -q "^dcr-commit: no version recorded: committing HEAD + 1 = 1$" "$T/err" ||
	fail "no HEAD + 1 message: $(cat "$T/err")"
head_is "$T/r" 1 "$(state_id "$G/v1")"
# a rerun finds HEAD at the applied state: nothing new
run 0 dcr-commit "$T/r"
grep -q "already at version 1" "$T/err" || fail "rerun: $(cat "$T/err")"
head_is "$T/r" 1 "$(state_id "$G/v1")"

bare "$G/v1" "$G/v2" "$T/r"
run 0 dcr-commit "$T/r"
grep -q "HEAD + 1 = 2" "$T/err" || fail "second bare commit: $(cat "$T/err")"
head_is "$T/r" 2 "$(state_id "$G/v2")"

# the delta's file name names the version: it wins, and nothing is said
run 0 dcr-diff "$G/v2" "$G/v3" -o "$T/v5.delta"
run 0 dcr-apply -q "$T/r" "$T/v5.delta"
run 0 dcr-commit "$T/r"
grep -q "HEAD + 1" "$T/err" && fail "a named delta was committed as HEAD + 1"
head_is "$T/r" 5 "$(state_id "$G/v3")"

# --version wins over HEAD + 1
bare "$G/v3" "$G/v4" "$T/r"
run 0 dcr-commit --version 7 "$T/r"
head_is "$T/r" 7 "$(state_id "$G/v4")"
run 0 dcr-commit --log --porcelain "$T/r"
[ "$(cut -f1 "$T/out" | tr '\n' ' ')" = "1 2 5 7 " ] || fail "log: $(cat "$T/out")"

# a receiver's first commit may be version 0 when named; then HEAD + 1 = 1
cp -r "$G/v0" "$T/z"
rm -rf "$T/z/.dcr"
bare "$G/v0" "$G/v1" "$T/z"
run 0 dcr-commit --version 0 "$T/z"
head_is "$T/z" 0 "$(state_id "$G/v1")"
bare "$G/v1" "$G/v2" "$T/z"
run 0 dcr-commit -q "$T/z"
[ ! -s "$T/err" ] || fail "-q printed: $(cat "$T/err")"
head_is "$T/z" 1 "$(state_id "$G/v2")"
say "ok: a bare commit is HEAD + 1; named versions win"

# a damaged HEAD (a disk's bit rot, a hand's edit) stops dcr-apply and
# dcr-commit in one line that names the way out, which works: moved
# aside, the next apply and a commit with its version go on
printf 'dcr-head 2\nversion seven\n' >"$T/z/.dcr/HEAD"
run 128 sh -c 'dcr-diff "$1" "$2" | dcr-apply -q "$3"' sh "$G/v2" "$G/v3" "$T/z"
grep -q "HEAD' is damaged (not a dcr-head 2 record): move it aside" "$T/err" ||
	fail "no way out named: $(cat "$T/err")"
run 128 dcr-commit --status "$T/z"
one_line_error dcr-commit
mv "$T/z/.dcr/HEAD" "$T/HEAD.damaged"
bare "$G/v2" "$G/v3" "$T/z"
run 0 dcr-commit --version 3 "$T/z"
head_is "$T/z" 3 "$(state_id "$G/v3")"
say "ok: a damaged HEAD names its way out, which works"

# a damaged record of the last apply: the same, its way out applying the
# last delta again (the files already hold its target: recorded, not
# applied twice)
sh -c 'dcr-diff "$1" "$2" >"$3"' sh "$G/v3" "$G/v4" "$T/d34"
run 0 dcr-apply -q "$T/z" "$T/d34"
printf 'junk\n' >"$T/z/.dcr/applied"
run 128 dcr-commit "$T/z"
one_line_error dcr-commit
grep -q "applied' is damaged (not a dcr-applied 2 record): move it aside; then apply the last delta again" "$T/err" ||
	fail "no way out named: $(cat "$T/err")"
mv "$T/z/.dcr/applied" "$T/applied.damaged"
run 0 dcr-apply "$T/z" "$T/d34"
grep -q "already at the target" "$T/err" || fail "the delta was applied twice: $(cat "$T/err")"
run 0 dcr-commit --version 4 "$T/z"
head_is "$T/z" 4 "$(state_id "$G/v4")"
say "ok: a damaged record of the last apply names its way out, which works"

# --full hashes every tensor again instead of trusting the state cache: it
# refuses files that no longer hold the applied target (a bit flipped after
# the apply), commits those that do, and --progress shows the bytes hashed
cp -r "$G/v0" "$T/f"
rm -rf "$T/f/.dcr"
bare "$G/v0" "$G/v1" "$T/f"
cp "$T/f/model.safetensors" "$T/keep"
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))' "$T/f/model.safetensors"
run 1 dcr-commit --full "$T/f"
grep -q "does not hold the applied target" "$T/err" || fail "--full: $(cat "$T/err")"
cp "$T/keep" "$T/f/model.safetensors"
run 0 dcr-commit --full --progress "$T/f"
grep -q "dcr-commit: hashed [0-9]*/[0-9]* MiB (100%)" "$T/err" || fail "no progress: $(cat -v "$T/err")"
head_is "$T/f" 1 "$(state_id "$G/v1")"
say "ok: dcr-commit --full rehashes, refuses, commits, shows progress"
