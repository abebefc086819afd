// What the profile summaries (profile-summary.ts for CPU profiles, allocation-summary.ts for heap
// profiles) share: where a profiled frame's code lives.

/** Where a frame's code lives: a package, one of our files, Node internals or the VM itself. */
export function sourceOf(url: string, functionName: string): string {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return 'node internals';
  const ours = /\/(src|plugins|bench)\/(.*)$/.exec(url);
  return ours ? `${ours[1]}/${ours[2]}` : url;
}
