// The benchmark's baseline: a bare Express 5 JSON POST endpoint, the fixed cost every Express
// service pays. agentgate's execute is reported as a ratio of this, measured in the same run.
import express from 'express';

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.use(express.json({ limit: 65_536 }));
app.post('/capability/execute', (req, res) => {
  res.json({ data: req.body as unknown });
});
const port = Number(process.env.PORT ?? 0);
const server = app.listen(port, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`${JSON.stringify({ listening: typeof address === 'object' && address ? address.port : port })}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
