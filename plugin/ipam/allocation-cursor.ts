// Where each pod range's allocation goes on after a restart. Addresses are handed out after the
// one given last (range-allocator.ts), so an address just released is not given to the next pod
// while Service endpoints and conntrack entries may still point at its old one; host-local keeps
// its last reserved address on disk for the same reason. Kept off the attach path: the file is
// written by the periodic sweep when it moved and at shutdown; at start the later of it and the
// newest sandbox record (a reboot, a kill -9) says where to go on.
import fs from 'node:fs';
import path from 'node:path';
import { log } from '../core/log';
import { AllocatedAddress, Ipam } from './ipam';

const FILE = 'ipam-last-given.json';

/** Writes the ranges' last given addresses when they differ from what the file holds. */
export function saveLastGiven(stateDir: string, ipam: Ipam, written: { text: string; error?: string }): void {
  const text = `${JSON.stringify(ipam.lastGiven())}\n`;
  if (text === written.text) return;
  const file = path.join(stateDir, FILE);
  try {
    fs.writeFileSync(`${file}.tmp`, text, { mode: 0o600 });
    fs.renameSync(`${file}.tmp`, file);
    written.text = text;
    written.error = undefined;
  } catch (e) {
    // Tried again at each sweep (a full disk clears); said once.
    if (written.error !== (e as Error).message) log('warn', 'cannot record where address allocation goes on after a restart', { file, error: (e as Error).message });
    written.error = (e as Error).message;
  }
}

/**
 * Resumes each range after its last given address: the file's, or the newest record's addresses
 * when that record was made after the file was written. What cannot be read is ignored (the
 * ranges then start from their first address, as on a fresh node).
 */
export function resumeAllocation(stateDir: string, ipam: Ipam, newest?: { createdAt: string; addresses: AllocatedAddress[] }): void {
  const file = path.join(stateDir, FILE);
  let saved: { at: number; lastGiven: Record<string, string> } | undefined;
  try {
    const lastGiven = JSON.parse(fs.readFileSync(file, 'utf8'));
    if (lastGiven && typeof lastGiven === 'object' && !Array.isArray(lastGiven)) saved = { at: fs.statSync(file).mtimeMs, lastGiven };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') log('warn', 'cannot read where address allocation went on; ranges start from their first address', { file, error: (e as Error).message });
  }
  if (saved) ipam.resumeAfter(saved.lastGiven);
  if (newest && (!saved || Date.parse(newest.createdAt) > saved.at)) ipam.resumeAfter(Object.fromEntries(newest.addresses.map((a) => [a.range, a.address])));
}
