// Label selectors as the API server evaluates them, for what kni decides from objects it reads:
// whether kni's DaemonSet still selects its node (leaving-node.ts), and which NetworkPolicies
// select a pod (network-policies.ts).
import type * as K8s from '@kubernetes/client-node';

/**
 * Whether one requirement holds for a label's value (undefined: the object has no such label):
 * In, NotIn, Exists, DoesNotExist, and Gt and Lt (node selectors only); undefined for an
 * operator the API server would have refused.
 */
export function requirementHolds(operator: string, values: string[], value: string | undefined): boolean | undefined {
  switch (operator) {
    case 'In': return value !== undefined && values.includes(value);
    case 'NotIn': return value === undefined || !values.includes(value);
    case 'Exists': return value !== undefined;
    case 'DoesNotExist': return value === undefined;
    case 'Gt': return value !== undefined && /^-?\d+$/.test(value) && values.length === 1 && Number(value) > Number(values[0]);
    case 'Lt': return value !== undefined && /^-?\d+$/.test(value) && values.length === 1 && Number(value) < Number(values[0]);
    default: return undefined;
  }
}

/** A label's value; undefined when the object has no such label (a key like "toString" included). */
export const labelValue = (labels: Record<string, string>, key: string): string | undefined => (Object.prototype.hasOwnProperty.call(labels, key) ? labels[key] : undefined);

/** Whether a label selector matches labels: every matchLabels pair and every expression (an empty selector matches everything). */
export function labelSelectorMatches(sel: K8s.V1LabelSelector | undefined, labels: Record<string, string>): boolean {
  if (Object.entries(sel?.matchLabels ?? {}).some(([k, v]) => labels[k] !== v)) return false;
  return (sel?.matchExpressions ?? []).every((e) => (e.operator === 'Gt' || e.operator === 'Lt' ? false : requirementHolds(e.operator, e.values ?? [], labelValue(labels, e.key)) ?? false));
}
