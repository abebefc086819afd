#!/usr/bin/env node
// The `agentgate` command (package.json "bin"): a thin entry; everything is in src/cli/.
// Node 24 runs it as TypeScript (type stripping); docs/cli.md documents the commands.
import { main } from '../src/cli/main.ts';

await main();
