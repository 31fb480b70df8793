// What knictl prints for a person (its table and line output), made safe for a terminal.
/**
 * Text for the operator's terminal: what a pod or a runtime named (pod names, interface names,
 * annotations' values, messages quoting them) may hold control characters or bidirectional
 * overrides that would rewrite the screen or hide text. Each such character is shown escaped
 * (\x1b, \u202e); line breaks stay. JSON output is left exact.
 */
export const printable = (s: string): string =>
  s.replace(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g, (ch) => {
    const code = ch.charCodeAt(0);
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
