// The tcp provider's portable data path (node:net, used where koffi cannot reach libc)
// passes the same conformance suite. Set before any device exists: socketLib() reads it once.
process.env.TANDEM_TCP_DATAPATH = 'net';
const { conformance } = await import('./conformance.cases.js');
conformance('tcp');
