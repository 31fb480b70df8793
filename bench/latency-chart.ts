// A latency chart as a standalone SVG: one bar per (concurrency, path, ADD/DEL) to p50, a
// whisker from p90 to p99, log-scale time axis. Written by hand: it is ~60 lines, and the
// chart libraries on npm want a DOM (or a headless browser) to render SVG.
interface Row {
  path: string;
  concurrency: number;
  add: { p50: number; p90: number; p99: number };
  del: { p50: number; p90: number; p99: number };
}

const COLORS = ['#2b6cb0', '#38a169', '#c05621', '#6b46c1', '#b7791f'];
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function latencyChart(rows: Row[], title: string): string {
  const paths = [...new Set(rows.map((r) => r.path))];
  const bars = rows.flatMap((r) => (['add', 'del'] as const).map((op) => ({ ...r[op], label: `${op.toUpperCase()} · ${r.concurrency} at once`, path: r.path })));
  const lo = 0.1;
  const hi = 10 ** Math.ceil(Math.log10(Math.max(...bars.map((b) => b.p99), 1)));
  const left = 170;
  const width = 640;
  const barH = 11;
  const top = 60;
  const x = (ms: number) => left + (Math.log10(Math.max(ms, lo) / lo) / Math.log10(hi / lo)) * width;
  const out: string[] = [];
  let y = top;
  let lastLabel = '';
  for (const b of bars) {
    if (b.label !== lastLabel) {
      y += 8;
      out.push(`<text x="${left - 8}" y="${y + barH * paths.length / 2 + 4}" text-anchor="end" font-size="12">${esc(b.label)}</text>`);
      lastLabel = b.label;
    }
    const color = COLORS[paths.indexOf(b.path) % COLORS.length];
    out.push(`<rect x="${left}" y="${y}" width="${(x(b.p50) - left).toFixed(1)}" height="${barH - 2}" fill="${color}"><title>${esc(b.path)} ${esc(b.label)}: p50 ${b.p50.toFixed(2)} ms, p90 ${b.p90.toFixed(2)}, p99 ${b.p99.toFixed(2)}</title></rect>`);
    out.push(`<line x1="${x(b.p90).toFixed(1)}" x2="${x(b.p99).toFixed(1)}" y1="${y + (barH - 2) / 2}" y2="${y + (barH - 2) / 2}" stroke="#222" stroke-width="1.5"/>`);
    out.push(`<text x="${(x(b.p99) + 4).toFixed(1)}" y="${y + barH - 3}" font-size="9" fill="#444">${b.p50.toFixed(b.p50 < 10 ? 2 : 0)}</text>`);
    y += barH;
  }
  const height = y + 50;
  const axis: string[] = [];
  for (let t = lo; t <= hi + 1e-9; t *= 10) {
    axis.push(`<line x1="${x(t)}" x2="${x(t)}" y1="${top}" y2="${y}" stroke="#ddd"/>`);
    axis.push(`<text x="${x(t)}" y="${y + 16}" text-anchor="middle" font-size="11">${t < 1 ? t.toFixed(1) : t.toFixed(0)} ms</text>`);
  }
  const legend = paths.map((p, i) => `<rect x="${left + i * 230}" y="34" width="12" height="10" fill="${COLORS[i % COLORS.length]}"/><text x="${left + i * 230 + 16}" y="43" font-size="12">${esc(p)}</text>`);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${left + width + 60}" height="${height}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${left}" y="20" font-size="14" font-weight="bold">${esc(title)}</text>`,
    ...legend,
    ...axis,
    ...out,
    `<text x="${left}" y="${height - 12}" font-size="10" fill="#444">bar: p50; whisker: p90 to p99; number: p50 (ms)</text>`,
    '</svg>',
  ].join('\n');
}
