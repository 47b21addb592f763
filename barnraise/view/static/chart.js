// A small time-series chart: each series scaled to its own maximum, drawn as a line.

export const SERIES = [
  { key: "completion", label: "completion %", colour: "#1565C0", max: 100 },
  { key: "tiles_placed", label: "tiles placed", colour: "#37474F" },
  { key: "tasks_completed", label: "tasks done", colour: "#43A047" },
  { key: "conflicts", label: "conflicts", colour: "#E53935" },
  { key: "messages_delivered", label: "messages", colour: "#8E24AA" },
];

export class Chart {
  constructor(canvas, legend, size = 600) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.points = [];
    this.size = size;
    this.dirty = true;
    legend.innerHTML = SERIES.map((s) =>
      `<span><i class="swatch" style="background:${s.colour}"></i> ${s.label}</span>`).join("");
  }

  reset(points) {
    this.points = (points || []).filter((p) => p && typeof p.t === "number").slice(-this.size);
    this.dirty = true;
  }

  add(point) {
    if (!point || typeof point.t !== "number") return;
    this.points.push(point);
    if (this.points.length > this.size) this.points.shift();
    this.dirty = true;
  }

  draw() {
    if (!this.dirty) return;
    this.dirty = false;
    const { canvas, ctx, points } = this;
    const w = canvas.width;
    const h = canvas.height;
    ctx.clearRect(0, 0, w, h);
    ctx.strokeStyle = "#ECEFF1";
    ctx.strokeRect(0.5, 0.5, w - 1, h - 1);
    if (points.length < 2) return;
    const t0 = points[0].t;
    const span = Math.max(1e-9, points[points.length - 1].t - t0);
    for (const s of SERIES) {
      let top = s.max || 0;
      if (!s.max) for (const p of points) top = Math.max(top, Number(p[s.key]) || 0);
      if (!(top > 0)) continue;
      ctx.strokeStyle = s.colour;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      points.forEach((p, i) => {
        const x = ((p.t - t0) / span) * (w - 4) + 2;
        const y = h - 2 - ((Number(p[s.key]) || 0) / top) * (h - 4);
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
    }
    ctx.fillStyle = "#78909C";
    ctx.font = "10px sans-serif";
    ctx.fillText(`t ${t0.toFixed(1)}–${points[points.length - 1].t.toFixed(1)} s`, 4, 11);
  }
}
