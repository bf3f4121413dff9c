#!/bin/sh
# Single-file checkpoints: dcr-diff takes two .safetensors files, or two
# directories holding one model.safetensors and no index; dcr-apply turns
# a directory holding A into B either way, metadata kept.
. "$DCR_SRC/tests/lib-dcr.sh"

$MKST new "$T/a.safetensors" w:BF16:32x32 b:BF16:32 n:F32:3
cp "$T/a.safetensors" "$T/b.safetensors"
$MKST xor "$T/b.safetensors" w 0=1 1023=2 512=7
$MKST set "$T/b.safetensors" n 1=80000000
differs "$T/a.safetensors" "$T/b.safetensors"

# files named alike, given as files
mkdir "$T/A" "$T/B"
cp "$T/a.safetensors" "$T/A/model.safetensors"
cp "$T/b.safetensors" "$T/B/model.safetensors"
roundtrip "$T/A/model.safetensors" "$T/B/model.safetensors"
[ "$(cd "$T/rt" && ls)" = model.safetensors ] || fail "receiver holds other files: $(ls "$T/rt")"
cmp "$T/rt/model.safetensors" "$T/B/model.safetensors" || fail "in-place apply changed the file layout"
# as directories
roundtrip "$T/A" "$T/B"
[ "$(cd "$T/rt" && ls)" = model.safetensors ] || fail "receiver holds other files: $(ls "$T/rt")"
[ ! -e "$T/rt/model.safetensors.index.json" ] || fail "an index appeared"
cmp "$T/rt/model.safetensors" "$T/B/model.safetensors" || fail "in-place apply changed the file layout"
roundtrip "$T/B" "$T/A"

# metadata survives a file rebuild (a tensor added)
python3 - "$T/A/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
h['__metadata__'] = {'format': 'pt', 'note': 'kept'}
s = json.dumps(h).encode()
s += b' ' * (-len(s) % 8)
open(p, 'wb').write(struct.pack('<Q', len(s)) + s + b[8 + n:])
PY
cp -r "$T/A" "$T/C"
$MKST add "$T/C" added:BF16:4
roundtrip "$T/A" "$T/C"
grep -q '"note": *"kept"' "$T/rt/model.safetensors" || fail "__metadata__ lost in a rebuild"
say "ok: single-file checkpoints"
