// The tile canvas: one canvas pixel per cell (scaled by CSS, pixelated), and an overlay
// for claims (outlined in their agent's colour) and conflicts (flashing).

const UNKNOWN_TILE = 0xff00ff; // a tile code outside the palette shows magenta

function rgb(hex) {
  const m = /^#?([0-9a-f]{6})$/i.exec(String(hex || ""));
  return m ? parseInt(m[1], 16) : UNKNOWN_TILE;
}

// It runs in the page's worker (feed.js) on the two canvases' OffscreenCanvas: decoding
// rectangles, drawing claims and flashes never take the page's main thread.
export class TileView {
  constructor(tiles, overlay) {
    this.tiles = tiles;
    this.overlay = overlay;
    this.ctx = tiles.getContext("2d", { willReadFrequently: true });
    this.octx = overlay.getContext("2d");
    this.width = 0;
    this.height = 0;
    this.lut = new Uint32Array(256);
    this.setPalette(["#FFFFFF"]);
    this.claims = new Map();
    this.flashes = [];
    this.overlayDirty = true;
    this.unknownTiles = 0;
    // The overlay's size in device pixels, as the page's ResizeObserver reports it
    // (asking the layout every frame forced a style and layout pass).
    this.overlaySize = [1, 1];
  }

  setOverlaySize(width, height) {
    this.overlaySize = [Math.max(1, Math.round(width)), Math.max(1, Math.round(height))];
    this.overlayDirty = true;
  }

  setPalette(colours) {
    // ImageData is RGBA in memory; a little-endian Uint32 view reads it as ABGR.
    for (let i = 0; i < 256; i++) {
      const c = i < colours.length ? rgb(colours[i]) : UNKNOWN_TILE;
      this.lut[i] = (0xff << 24) | ((c & 0xff) << 16) | (c & 0xff00) | ((c >> 16) & 0xff);
    }
    this.paletteSize = colours.length;
  }

  resize(height, width) {
    if (width === this.width && height === this.height) return;
    this.width = width;
    this.height = height;
    this.tiles.width = width;
    this.tiles.height = height;
    this.ctx.fillStyle = "#FFFFFF";
    this.ctx.fillRect(0, 0, width, height);
    this.overlayDirty = true;
  }

  // One rectangle of tile codes: {x, y, w, h, data: base64 of w*h bytes}.
  putRect(rect) {
    const { x, y, w, h } = rect;
    if (![x, y, w, h].every(Number.isInteger) || w <= 0 || h <= 0 ||
        x < 0 || y < 0 || x + w > this.width || y + h > this.height) {
      throw new Error(`rectangle outside the canvas: ${JSON.stringify({ x, y, w, h })}`);
    }
    const raw = atob(rect.data);
    if (raw.length !== w * h) throw new Error(`rectangle data has ${raw.length} bytes, not ${w * h}`);
    const image = this.ctx.createImageData(w, h);
    const out = new Uint32Array(image.data.buffer);
    const lut = this.lut;
    const top = this.paletteSize;
    for (let i = 0; i < out.length; i++) {
      const code = raw.charCodeAt(i);
      if (code >= top) this.unknownTiles++;
      out[i] = lut[code];
    }
    this.ctx.putImageData(image, x, y);
  }

  setClaims(list) {
    this.claims.clear();
    for (const c of list) this.claims.set(c.id, c);
    this.overlayDirty = true;
  }

  updateClaims(added, removed) {
    for (const id of removed || []) this.claims.delete(id);
    for (const c of added || []) this.claims.set(c.id, c);
    if ((added && added.length) || (removed && removed.length)) this.overlayDirty = true;
  }

  flash(region, now) {
    if (!region) return;
    this.flashes.push({ region, until: now + 1200 });
    if (this.flashes.length > 200) this.flashes.splice(0, this.flashes.length - 200);
  }

  // True while the overlay has something to draw in a later frame (a flash going on).
  busy(now) {
    return this.overlayDirty || this.flashes.some((f) => f.until > now);
  }

  // Called on every animation frame; redraws the overlay only when something moved.
  draw(now) {
    const o = this.overlay;
    const [pw, ph] = this.overlaySize;
    if (o.width !== pw || o.height !== ph) {
      o.width = pw;
      o.height = ph;
      this.overlayDirty = true;
    }
    const flashing = this.flashes.length;
    this.flashes = this.flashes.filter((f) => f.until > now);
    if (this.flashes.length < flashing) this.overlayDirty = true; // one ended: wipe it
    if (!this.overlayDirty && this.flashes.length === 0) return;
    const ctx = this.octx;
    ctx.clearRect(0, 0, pw, ph);
    if (this.width && this.height) {
      const sx = pw / this.width;
      const sy = ph / this.height;
      ctx.lineWidth = Math.max(1, Math.min(3, sx * 0.6));
      for (const c of this.claims.values()) {
        ctx.strokeStyle = c.color || "#FF0000";
        ctx.strokeRect(c.x * sx + 0.5, c.y * sy + 0.5, c.w * sx - 1, c.h * sy - 1);
      }
      for (const f of this.flashes) {
        const r = f.region;
        const phase = Math.floor((f.until - now) / 150) % 2 === 0;
        ctx.fillStyle = phase ? "rgba(229,57,53,0.55)" : "rgba(229,57,53,0.15)";
        ctx.fillRect(r.x * sx, r.y * sy, r.width * sx, r.height * sy);
      }
    }
    this.overlayDirty = false;
  }

  // The tile layer's pixels (for a test or a screenshot): RGBA bytes, row by row.
  pixels() {
    if (!this.width || !this.height) return new Uint8ClampedArray(0);
    return this.ctx.getImageData(0, 0, this.width, this.height).data;
  }

  // The overlay's pixel over cell (x, y), drawn up to now: RGBA.
  overlayAt(x, y, now) {
    this.draw(now);
    const o = this.overlay;
    const px = Math.floor(((x + 0.5) / this.width) * o.width);
    const py = Math.floor(((y + 0.5) / this.height) * o.height);
    return Array.from(this.octx.getImageData(px, py, 1, 1).data);
  }
}
