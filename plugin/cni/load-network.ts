// The CNI network of defaultNetwork.cni, read and checked when kni starts: a bad file stops
// kni with every problem named, as a bad config file does.
import fs from 'node:fs';
import { ConfigError, DefaultNetworkConfig } from '../core/config';
import { CniNetwork } from './cni-network';
import { CniResultCache } from './cni-result-cache';
import { CniConfigError, parseNetworkConfig } from './conflist';

export function loadCniNetwork(d: DefaultNetworkConfig, cacheDir: string): CniNetwork {
  let text: string;
  try {
    text = fs.readFileSync(d.cni, 'utf8');
  } catch (e) {
    throw new ConfigError(`defaultNetwork.cni: cannot read ${d.cni}: ${(e as Error).message}`);
  }
  try {
    return new CniNetwork(parseNetworkConfig(text, d.cni), d, new CniResultCache(cacheDir));
  } catch (e) {
    throw e instanceof CniConfigError ? new ConfigError(`defaultNetwork.cni: ${e.message}`) : e;
  }
}
