// Terminal output as a browser shows it: carriage-return progress bars (tqdm) collapse to their last
// state, ANSI colours (SGR: ESC[...m) become coloured spans, other escape sequences are dropped.

// eslint-disable-next-line no-control-regex
const ESC = /\x1b\[([0-9;?]*)([A-Za-z])/g;
// eslint-disable-next-line no-control-regex
const OTHER = /\x1b[^[]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/g;

// "10%|#  \r 20%|## \r 30%|###" -> " 30%|###": what the terminal shows after the last \r.
export function collapseCR(text) {
  if (!text.includes("\r")) return text;
  const parts = text.split("\r");
  for (let i = parts.length - 1; i >= 0; i--) if (parts[i].trim()) return parts[i];
  return "";
}

export function stripAnsi(text) { return text.replace(ESC, "").replace(OTHER, ""); }

const NAMES = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"];

// [{text, cls}] runs of one style each.
export function ansiRuns(text) {
  const runs = [];
  let fg = null, bg = null, bold = false, dim = false, italic = false, underline = false;
  let at = 0;
  const push = (s) => {
    s = s.replace(OTHER, "");
    if (!s) return;
    const cls = [fg && `fg-${fg}`, bg && `bg-${bg}`, bold && "b", dim && "dim", italic && "i", underline && "u"].filter(Boolean).join(" ");
    runs.push({ text: s, cls });
  };
  for (const m of text.matchAll(ESC)) {
    push(text.slice(at, m.index));
    at = m.index + m[0].length;
    if (m[2] !== "m") continue; // cursor moves, erase line...: nothing to draw
    const codes = m[1] === "" ? [0] : m[1].split(";").map(Number);
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) { fg = bg = null; bold = dim = italic = underline = false; }
      else if (c === 1) bold = true;
      else if (c === 2) dim = true;
      else if (c === 3) italic = true;
      else if (c === 4) underline = true;
      else if (c === 22) bold = dim = false;
      else if (c === 23) italic = false;
      else if (c === 24) underline = false;
      else if (c >= 30 && c <= 37) fg = NAMES[c - 30];
      else if (c >= 90 && c <= 97) fg = `bright-${NAMES[c - 90]}`;
      else if (c === 39) fg = null;
      else if (c >= 40 && c <= 47) bg = NAMES[c - 40];
      else if (c >= 100 && c <= 107) bg = `bright-${NAMES[c - 100]}`;
      else if (c === 49) bg = null;
      else if ((c === 38 || c === 48) && codes[i + 1] === 5) i += 2; // 256 colours: not mapped, skipped
      else if ((c === 38 || c === 48) && codes[i + 1] === 2) i += 4; // true colour: skipped
    }
  }
  push(text.slice(at));
  return runs;
}
