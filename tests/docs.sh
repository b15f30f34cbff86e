#!/usr/bin/env bash
# The docs check: the README and docs/ say nothing that is not there.
#
#   bash tests/docs.sh [SPROUT_BINARY]     (default: target/dist/sprout, what tests/run.sh builds)
#
# 1. Every relative link in README.md and docs/*.md names a file or
#    directory that exists; a `#anchor` into a .md file names one of its
#    headings (GitHub's slugs: lowercase, punctuation but - and _ dropped,
#    spaces as -, a repeated heading gets -1, -2, ...). Links inside code
#    are not links.
# 2. The README's fenced blocks marked with a `<!-- docs-check -->` line
#    run, in order, from the repository's root, against a fresh server:
#    the block marked `<!-- docs-check: server -->` is started in the
#    background, with `sprout` on PATH meaning SPROUT_BINARY, on free ports
#    in a temporary directory (11300 and 11380 in the blocks are replaced
#    by those ports, ./sprout-data by a directory under it; SPROUT_PORT and
#    SPROUT_ADMIN_HTTP name them to a sprout without flags). Each other
#    block runs under `bash -eo pipefail`; any non-zero status fails the
#    check, as does the server ending early. `python3` is the one of
#    target/test-venv (greenstalk; tests/run.sh makes it) when that exists,
#    or of $SPROUT_DOCS_VENV.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
binary=$(realpath "${1:-target/dist/sprout}")
[ -x "$binary" ] || { echo "docs check: no sprout binary at $binary" >&2; exit 1; }

# --- 1. links -------------------------------------------------------------
python3 - README.md docs/*.md <<'EOF'
import os, re, sys, unicodedata

def strip_code(text):
    """The text with fenced blocks and inline code blanked out."""
    out, fenced = [], False
    for line in text.split('\n'):
        if re.match(r'\s*(```|~~~)', line):
            fenced = not fenced
            out.append('')
        elif fenced:
            out.append('')
        else:
            out.append(re.sub(r'`+[^`]*`+', '', line))
    return out

def slug(heading):
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # a link's text
    text = text.strip().lower()
    text = ''.join(ch for ch in text
                   if ch in ' -_' or unicodedata.category(ch)[0] in 'LN')
    return text.replace(' ', '-')

def anchors(path):
    seen, out, fenced = {}, set(), False
    for line in open(path, encoding='utf-8').read().split('\n'):
        if re.match(r'\s*(```|~~~)', line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f'{base}-{n}')
    return out

bad = 0
for page in sys.argv[1:]:
    lines = strip_code(open(page, encoding='utf-8').read())
    for number, line in enumerate(lines, 1):
        for target in re.findall(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)', line):
            if re.match(r'[a-z][a-z0-9+.-]*:', target):  # https:, mailto:
                continue
            path, _, frag = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            where = f'{page}:{number}: ({target})'
            if not os.path.exists(dest):
                print(f'docs check: {where}: no file {dest}', file=sys.stderr)
                bad += 1
            elif frag and dest.endswith('.md') and frag not in anchors(dest):
                print(f'docs check: {where}: no heading #{frag} in {dest}', file=sys.stderr)
                bad += 1
if bad:
    sys.exit(f'docs check: {bad} broken link(s)')
print(f'docs check: links of {len(sys.argv) - 1} pages resolve')
EOF

# --- 2. the README's first-job blocks -----------------------------------
tmp=$(mktemp -d)
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill -- -"$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

mkdir "$tmp/bin"
ln -s "$binary" "$tmp/bin/sprout"
venv=${SPROUT_DOCS_VENV:-$root/target/test-venv}
[ -x "$venv/bin/python3" ] && PATH="$venv/bin:$PATH"
export PATH="$tmp/bin:$PATH"

read -r port http_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')

# Writes server.sh and 1.sh, 2.sh, ... into $tmp, with the ports and the
# data directory replaced.
python3 - README.md "$tmp" "$port" "$http_port" <<'EOF'
import re, sys
readme, tmp, port, http_port = sys.argv[1:]
lines = open(readme, encoding='utf-8').read().split('\n')
blocks, i = [], 0
while i < len(lines):
    m = re.match(r'<!--\s*docs-check(:\s*server)?\s*-->\s*$', lines[i])
    i += 1
    if not m:
        continue
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or not re.match(r'```(sh|bash|shell)\s*$', lines[i]):
        sys.exit(f'docs check: {readme}:{i}: a docs-check mark without a sh block after it')
    start = i = i + 1
    while i < len(lines) and lines[i].strip() != '```':
        i += 1
    text = '\n'.join(lines[start:i]) + '\n'
    text = (text.replace('11300', port).replace('11380', http_port)
                .replace('./sprout-data', f'{tmp}/sprout-data'))
    blocks.append((bool(m.group(1)), start, text))
servers = [b for b in blocks if b[0]]
if len(servers) != 1 or not any(not b[0] for b in blocks):
    sys.exit(f'docs check: {readme} needs one docs-check server block and others to run')
n = 0
for server, line, text in blocks:
    if server:
        name = 'server.sh'
    else:
        n += 1
        name = f'{n}.sh'
    open(f'{tmp}/{name}', 'w').write(f'# {readme}:{line}\n' + text)
print(f'docs check: {n} README block(s) to run against a fresh server')
EOF

export SPROUT_PORT=$port SPROUT_ADMIN_HTTP=127.0.0.1:$http_port
echo "docs check: starting: $(tail -n +2 "$tmp/server.sh")"
setsid bash "$tmp/server.sh" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "docs check: the README's server block does not serve on port $port:" >&2
    cat "$tmp/server.log" >&2
    exit 1
fi

n=1
while [ -f "$tmp/$n.sh" ]; do
    echo "docs check: running $(head -1 "$tmp/$n.sh" | cut -c3-)"
    if ! bash -eo pipefail "$tmp/$n.sh"; then
        echo "docs check: FAILED: this README block:" >&2
        cat "$tmp/$n.sh" >&2
        echo "docs check: server log:" >&2
        cat "$tmp/server.log" >&2
        exit 1
    fi
    n=$((n + 1))
done
if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "docs check: the server ended during the blocks:" >&2
    cat "$tmp/server.log" >&2
    exit 1
fi
echo "docs check: passed"
