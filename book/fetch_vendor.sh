#!/usr/bin/env bash
# Fetch the ipywidgets renderer (html-manager) and require.js from the npm registry into $1,
# so that widget pages render offline. Versions are the ones myst-nb 1.4 loads from its CDN.
set -euo pipefail
dest=${1:-book/_vendor}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dest"
( cd "$tmp" && npm pack --silent @jupyter-widgets/html-manager@1.0.6 requirejs@2.3.8 >/dev/null )
tar xzf "$tmp"/jupyter-widgets-html-manager-1.0.6.tgz -C "$tmp"
cp "$tmp"/package/dist/* "$dest"/
rm -rf "$tmp"/package
tar xzf "$tmp"/requirejs-2.3.8.tgz -C "$tmp"
cp "$tmp"/package/require.js "$dest"/require.js
rm -f "$dest"/*.map
echo "widget JS in $dest: $(ls "$dest" | wc -l) files"
