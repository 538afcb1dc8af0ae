// A small QR code encoder (ISO/IEC 18004) for the dashboard's "open on your phone" code.
//
// Byte mode (UTF-8), error correction L (7 %) or M (15 %), versions 1 to 10: up to 213 bytes at M, plenty for
// a dashboard URL. Steps: the data bits (mode, length, bytes, terminator, pad codewords), Reed-Solomon error
// correction per block over GF(256) (polynomial 0x11D), blocks interleaved, function patterns (finders, timing,
// alignment, dark module, format and version information), data placed in the two-column zigzag, then each of
// the eight masks applied and scored with the four penalty rules; the lowest score wins (the first on a tie).
// No dependencies; `encode` returns the module matrix, `toSvg` draws it.

const MAX_VERSION = 10;

/** Format-information bits of each error correction level. */
const LEVEL_BITS = { L: 1, M: 0 };

/**
 * Error correction blocks per version (index 1 to 10) and level:
 * [EC codewords per block, [block count, data codewords per block], ...].
 */
const BLOCKS = {
  L: [null, [7, [1, 19]], [10, [1, 34]], [15, [1, 55]], [20, [1, 80]], [26, [1, 108]], [18, [2, 68]],
    [20, [2, 78]], [24, [2, 97]], [30, [2, 116]], [18, [2, 68], [2, 69]]],
  M: [null, [10, [1, 16]], [16, [1, 28]], [26, [1, 44]], [18, [2, 32]], [24, [2, 43]], [16, [4, 27]],
    [18, [4, 31]], [22, [2, 38], [2, 39]], [22, [3, 36], [2, 37]], [26, [4, 43], [1, 44]]],
};

/** Centre rows and columns of the alignment patterns per version. */
const ALIGNMENT = [null, [], [6, 18], [6, 22], [6, 26], [6, 30], [6, 34], [6, 22, 38], [6, 24, 42], [6, 26, 46],
  [6, 28, 50]];

const MASKS = [
  (x, y) => (x + y) % 2 === 0,
  (x, y) => y % 2 === 0,
  (x) => x % 3 === 0,
  (x, y) => (x + y) % 3 === 0,
  (x, y) => (Math.floor(x / 3) + Math.floor(y / 2)) % 2 === 0,
  (x, y) => ((x * y) % 2) + ((x * y) % 3) === 0,
  (x, y) => (((x * y) % 2) + ((x * y) % 3)) % 2 === 0,
  (x, y) => (((x + y) % 2) + ((x * y) % 3)) % 2 === 0,
];

// ------------------------------------------------------------ GF(256)

const EXP = new Uint8Array(512);
const LOG = new Uint8Array(256);
{
  let value = 1;
  for (let i = 0; i < 255; i += 1) {
    EXP[i] = value;
    LOG[value] = i;
    value <<= 1;
    if (value & 0x100) value ^= 0x11d;
  }
  for (let i = 255; i < 512; i += 1) EXP[i] = EXP[i - 255];
}

function multiply(a, b) {
  return a === 0 || b === 0 ? 0 : EXP[LOG[a] + LOG[b]];
}

/** The generator polynomial (x - α^0)(x - α^1)…(x - α^(degree-1)), highest power first, leading 1 dropped. */
function generator(degree) {
  let poly = [1];
  for (let i = 0; i < degree; i += 1) {
    const next = new Array(poly.length + 1).fill(0);
    for (let j = 0; j < poly.length; j += 1) {
      next[j] ^= poly[j];
      next[j + 1] ^= multiply(poly[j], EXP[i]);
    }
    poly = next;
  }
  return poly.slice(1);
}

/** The `degree` error correction codewords of `data` (the remainder of data·x^degree by the generator). */
function reedSolomon(data, degree) {
  const gen = generator(degree);
  const remainder = new Array(degree).fill(0);
  for (const byte of data) {
    const factor = byte ^ remainder.shift();
    remainder.push(0);
    for (let i = 0; i < degree; i += 1) remainder[i] ^= multiply(gen[i], factor);
  }
  return remainder;
}

// ------------------------------------------------------------ codewords

function dataCodewords(version, level) {
  const [, ...groups] = BLOCKS[level][version];
  return groups.reduce((sum, [count, size]) => sum + count * size, 0);
}

/** Mode, length, bytes, terminator and padding, as `dataCodewords` bytes. */
function dataBits(bytes, version, level) {
  const capacity = dataCodewords(version, level) * 8;
  const bits = [];
  const push = (value, length) => {
    for (let i = length - 1; i >= 0; i -= 1) bits.push((value >>> i) & 1);
  };
  push(0b0100, 4); // byte mode
  push(bytes.length, version < 10 ? 8 : 16);
  for (const byte of bytes) push(byte, 8);
  push(0, Math.min(4, capacity - bits.length)); // terminator
  push(0, (8 - (bits.length % 8)) % 8);
  for (let pad = 0xec; bits.length < capacity; pad ^= 0xec ^ 0x11) push(pad, 8);
  const codewords = [];
  for (let i = 0; i < bits.length; i += 8) {
    let byte = 0;
    for (let j = 0; j < 8; j += 1) byte = (byte << 1) | bits[i + j];
    codewords.push(byte);
  }
  return codewords;
}

/** Data and error correction codewords of every block, interleaved as the symbol carries them. */
function interleave(data, version, level) {
  const [ecLength, ...groups] = BLOCKS[level][version];
  const blocks = [];
  let offset = 0;
  for (const [count, size] of groups) {
    for (let i = 0; i < count; i += 1) {
      const block = data.slice(offset, offset + size);
      offset += size;
      blocks.push({ data: block, ec: reedSolomon(block, ecLength) });
    }
  }
  const out = [];
  const longest = Math.max(...blocks.map((b) => b.data.length));
  for (let i = 0; i < longest; i += 1) for (const b of blocks) if (i < b.data.length) out.push(b.data[i]);
  for (let i = 0; i < ecLength; i += 1) for (const b of blocks) out.push(b.ec[i]);
  return out;
}

// --------------------------------------------------------------- matrix

class Grid {
  constructor(version) {
    this.size = version * 4 + 17;
    this.dark = Array.from({ length: this.size }, () => new Array(this.size).fill(false));
    this.reserved = Array.from({ length: this.size }, () => new Array(this.size).fill(false));
  }

  set(x, y, dark) {
    this.dark[y][x] = dark;
    this.reserved[y][x] = true;
  }
}

function drawFunctionPatterns(grid, version) {
  const { size } = grid;
  for (let i = 0; i < size; i += 1) {
    grid.set(6, i, i % 2 === 0);
    grid.set(i, 6, i % 2 === 0);
  }
  // Finders with their light separators.
  for (const [cx, cy] of [[3, 3], [size - 4, 3], [3, size - 4]]) {
    for (let dy = -4; dy <= 4; dy += 1) {
      for (let dx = -4; dx <= 4; dx += 1) {
        const x = cx + dx;
        const y = cy + dy;
        if (x < 0 || y < 0 || x >= size || y >= size) continue;
        const ring = Math.max(Math.abs(dx), Math.abs(dy));
        grid.set(x, y, ring !== 2 && ring !== 4);
      }
    }
  }
  const centres = ALIGNMENT[version];
  const last = centres.length - 1;
  for (let i = 0; i <= last; i += 1) {
    for (let j = 0; j <= last; j += 1) {
      if ((i === 0 && j === 0) || (i === 0 && j === last) || (i === last && j === 0)) continue; // finders
      for (let dy = -2; dy <= 2; dy += 1) {
        for (let dx = -2; dx <= 2; dx += 1) grid.set(centres[i] + dx, centres[j] + dy, Math.max(Math.abs(dx), Math.abs(dy)) !== 1);
      }
    }
  }
  drawFormat(grid, 'M', 0); // reserves the areas; drawn for real once the mask is known
  if (version >= 7) {
    let rem = version;
    for (let i = 0; i < 12; i += 1) rem = (rem << 1) ^ ((rem >>> 11) * 0x1f25);
    const bits = (version << 12) | rem;
    for (let i = 0; i < 18; i += 1) {
      const dark = ((bits >>> i) & 1) === 1;
      const a = size - 11 + (i % 3);
      const b = Math.floor(i / 3);
      grid.set(a, b, dark);
      grid.set(b, a, dark);
    }
  }
}

/** The 15 format bits (level and mask, BCH(15,5), XOR 0x5412) in both copies, and the dark module. */
function drawFormat(grid, level, mask) {
  const { size } = grid;
  const data = (LEVEL_BITS[level] << 3) | mask;
  let rem = data;
  for (let i = 0; i < 10; i += 1) rem = (rem << 1) ^ ((rem >>> 9) * 0x537);
  const bits = ((data << 10) | rem) ^ 0x5412;
  const bit = (i) => ((bits >>> i) & 1) === 1;
  for (let i = 0; i <= 5; i += 1) grid.set(8, i, bit(i));
  grid.set(8, 7, bit(6));
  grid.set(8, 8, bit(7));
  grid.set(7, 8, bit(8));
  for (let i = 9; i < 15; i += 1) grid.set(14 - i, 8, bit(i));
  for (let i = 0; i < 8; i += 1) grid.set(size - 1 - i, 8, bit(i));
  for (let i = 8; i < 15; i += 1) grid.set(8, size - 15 + i, bit(i));
  grid.set(8, size - 8, true);
}

/** Codeword bits into the free modules: two columns at a time from the right, up then down, skipping column 6. */
function placeData(grid, codewords) {
  const { size } = grid;
  const total = codewords.length * 8;
  let i = 0;
  for (let right = size - 1; right >= 1; right -= 2) {
    if (right === 6) right = 5;
    const upward = ((right + 1) & 2) === 0;
    for (let step = 0; step < size; step += 1) {
      const y = upward ? size - 1 - step : step;
      for (let j = 0; j < 2; j += 1) {
        const x = right - j;
        if (grid.reserved[y][x]) continue;
        // Remainder bits (past the last codeword) stay light.
        grid.dark[y][x] = i < total && ((codewords[i >>> 3] >>> (7 - (i & 7))) & 1) === 1;
        i += 1;
      }
    }
  }
}

function applyMask(grid, mask) {
  const test = MASKS[mask];
  for (let y = 0; y < grid.size; y += 1) {
    for (let x = 0; x < grid.size; x += 1) if (!grid.reserved[y][x] && test(x, y)) grid.dark[y][x] = !grid.dark[y][x];
  }
}

// -------------------------------------------------------------- penalty

/** 40 for each 1:1:3:1:1 finder-like run in `line` with four light modules (or the symbol's edge) on a side. */
function finderLikePenalty(line) {
  const n = line.length;
  const pattern = [1, 0, 1, 1, 1, 0, 1];
  const lightFrom = (start, end) => {
    for (let k = Math.max(start, 0); k < Math.min(end, n); k += 1) if (line[k]) return false;
    return true;
  };
  let score = 0;
  let i = 0;
  while (i <= n - 7) {
    let match = true;
    for (let k = 0; k < 7; k += 1) {
      if (line[i + k] !== pattern[k]) {
        match = false;
        break;
      }
    }
    if (!match) {
      i += 1;
      continue;
    }
    if (lightFrom(i - 4, i) || lightFrom(i + 7, i + 11)) {
      score += 40;
      i += 7;
    } else {
      i += 4;
    }
  }
  return score;
}

/** The penalty score (ISO/IEC 18004 7.8.3: N1 = 3, N2 = 3, N3 = 40, N4 = 10) of a matrix of 0/1 rows. */
export function penalty(matrix) {
  const size = matrix.length;
  let score = 0;
  let dark = 0;
  const runs = (line) => {
    let total = 0;
    let run = 1;
    for (let k = 1; k <= line.length; k += 1) {
      if (k < line.length && line[k] === line[k - 1]) {
        run += 1;
      } else {
        if (run >= 5) total += run - 2;
        run = 1;
      }
    }
    return total;
  };
  for (let y = 0; y < size; y += 1) {
    const row = matrix[y];
    const column = matrix.map((r) => r[y]);
    score += runs(row) + runs(column) + finderLikePenalty(row) + finderLikePenalty(column);
    for (let x = 0; x < size; x += 1) {
      dark += row[x];
      if (x > 0 && y > 0) {
        const v = row[x];
        if (v === row[x - 1] && v === matrix[y - 1][x] && v === matrix[y - 1][x - 1]) score += 3;
      }
    }
  }
  score += 10 * Math.floor(Math.abs(dark * 100 - 50 * size * size) / (5 * size * size));
  return score;
}

// ----------------------------------------------------------------- API

/**
 * Encodes `text` (UTF-8, byte mode) in the smallest version that holds it.
 * Options: `level` 'M' (default) or 'L'; `mask` 0–7 to force one instead of choosing the lowest penalty.
 * Returns {version, level, mask, size, modules}: `modules[y][x]` is 1 for a dark module, 0 for a light one.
 * Throws a RangeError when the text does not fit in version 10.
 */
export function encode(text, { level = 'M', mask } = {}) {
  if (!(level in LEVEL_BITS)) throw new RangeError(`error correction level ${level} is not supported (L or M)`);
  const bytes = new TextEncoder().encode(String(text));
  let version = 0;
  for (let v = 1; v <= MAX_VERSION; v += 1) {
    if (4 + (v < 10 ? 8 : 16) + bytes.length * 8 <= dataCodewords(v, level) * 8) {
      version = v;
      break;
    }
  }
  if (!version) {
    throw new RangeError(`${bytes.length} bytes do not fit in a version ${MAX_VERSION} QR code at level ${level}`);
  }
  const codewords = interleave(dataBits(bytes, version, level), version, level);
  const base = new Grid(version);
  drawFunctionPatterns(base, version);
  placeData(base, codewords);

  const build = (m) => {
    const grid = new Grid(version);
    grid.dark = base.dark.map((row) => row.slice());
    grid.reserved = base.reserved;
    applyMask(grid, m);
    drawFormat(grid, level, m);
    return grid.dark.map((row) => row.map((d) => (d ? 1 : 0)));
  };
  let chosen = mask;
  let modules = null;
  if (Number.isInteger(chosen) && chosen >= 0 && chosen < 8) {
    modules = build(chosen);
  } else {
    let best = Infinity;
    for (let m = 0; m < 8; m += 1) {
      const candidate = build(m);
      const score = penalty(candidate);
      if (score < best) {
        best = score;
        chosen = m;
        modules = candidate;
      }
    }
  }
  return { version, level, mask: chosen, size: base.size, modules };
}

/**
 * An <svg> element of the code (dark modules as one path) with a four-module quiet zone, `pixels` wide.
 * Colours come from the `fill` attributes, black on white, whatever the page's theme: scanners want contrast.
 */
export function toSvg(code, { pixels = 232, label = 'QR code' } = {}) {
  const ns = 'http://www.w3.org/2000/svg';
  const quiet = 4;
  const span = code.size + quiet * 2;
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${span} ${span}`);
  svg.setAttribute('width', String(pixels));
  svg.setAttribute('height', String(pixels));
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  svg.setAttribute('shape-rendering', 'crispEdges');
  const background = document.createElementNS(ns, 'rect');
  background.setAttribute('width', String(span));
  background.setAttribute('height', String(span));
  background.setAttribute('fill', '#ffffff');
  const parts = [];
  code.modules.forEach((row, y) => {
    row.forEach((dark, x) => {
      if (dark) parts.push(`M${x + quiet} ${y + quiet}h1v1h-1z`);
    });
  });
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', parts.join(''));
  path.setAttribute('fill', '#000000');
  svg.append(background, path);
  return svg;
}
