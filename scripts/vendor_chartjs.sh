#!/usr/bin/env bash
# Vendor Chart.js for the dashboard (app/dashboard/static/vendor/) from the npm registry,
# pinned and checked: the dashboard loads nothing from a CDN. Usage: scripts/vendor_chartjs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.6.1
sha256=87364cc2b2a76a6684929e7d6b80b18a897794db38400caff1fcf1791c6925d2
out=app/dashboard/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "chart.js@$version" >/dev/null && tar xzf "chart.js-$version.tgz")
echo "$sha256  $work/package/dist/chart.umd.min.js" | sha256sum --check --quiet
cp "$work/package/dist/chart.umd.min.js" "$out/chart.umd.min.js"
cp "$work/package/LICENSE.md" "$out/chart.js-LICENSE.md"
echo "Chart.js $version vendored into $out"
