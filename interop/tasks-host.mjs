// A task-aware MCP host on the official TypeScript SDK 2.x client
// (`@modelcontextprotocol/client`) and its tasks requester (`@modelcontextprotocol/ext-tasks`),
// the pair the MCP Inspector drives tasks with. Run by the tests on the interop Node:
//
//   node tasks-host.mjs URL TOOL ARGS_JSON [--era modern|legacy] [--answer JSON]
//       [--cancel-on TEXT] [--timeout-s N]
//
// It connects at the era asked (modern: 2026-07-28 with the tasks extension; legacy:
// 2025-11-25), calls TOOL with a task required of the server, answers a form question
// (elicitation) with --answer (default {"approved": true}), with --cancel-on cancels the
// task once a poll shows it working with TEXT in its status message, and prints one JSON
// line per step: {connected}, {execution}, {task} per task view, {elicited}, {outcome}.
// Exit 0 once an outcome was printed.
//
// The raw dispatch is the one piece ext-tasks leaves to its host for 2026-07-28 task traffic
// (the SDK client's codecs reject those wire shapes): requests the session frames are sent on
// the SDK's own transport, and their answers taken off it before the SDK sees them, as the
// Inspector's RawWireChannel does. Bounded: it exits after MAX_LIFETIME_MS whatever happens.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
    createApplicationInputHandler,
    createTaskSessionFromClient,
    toolDeclarationFromMcpTool,
} from '@modelcontextprotocol/ext-tasks/client';

const MAX_LIFETIME_MS = 150_000;
const MODERN = '2026-07-28';
const RAW_ID_PREFIX = 'tasks-host-';
setTimeout(() => { emit({ error: 'lifetime over' }); process.exit(3); }, MAX_LIFETIME_MS).unref();

function emit(event) {
    process.stdout.write(JSON.stringify(event) + '\n');
}

function options(argv) {
    const [url, tool, rawArgs, ...rest] = argv;
    const parsed = { url, tool, args: JSON.parse(rawArgs), era: 'modern', answer: { approved: true }, cancelOn: null, timeoutMs: 60_000 };
    for (let i = 0; i < rest.length; i++) {
        if (rest[i] === '--era') parsed.era = rest[++i];
        else if (rest[i] === '--answer') parsed.answer = JSON.parse(rest[++i]);
        else if (rest[i] === '--cancel-on') parsed.cancelOn = rest[++i];
        else if (rest[i] === '--timeout-s') parsed.timeoutMs = Number(rest[++i]) * 1000;
        else throw new Error(`unknown option ${rest[i]}`);
    }
    return parsed;
}

/** Requests sent on the SDK transport, answered before the SDK client sees the answers. */
function rawChannel(transport, timeoutMs) {
    const pending = new Map();
    let counter = 0;
    const sdkOnMessage = transport.onmessage;
    transport.onmessage = (message, extra) => {
        const waiting = typeof message?.id === 'string' ? pending.get(message.id) : undefined;
        if (waiting === undefined) return sdkOnMessage?.(message, extra);
        pending.delete(message.id);
        clearTimeout(waiting.timer);
        waiting.resolve('error' in message
            ? { kind: 'error', error: message.error }
            : { kind: 'result', result: message.result });
    };
    return (request, dispatchOptions = {}) => new Promise((resolve, reject) => {
        const id = `${RAW_ID_PREFIX}${++counter}`;
        const timer = setTimeout(() => {
            pending.delete(id);
            reject(new Error(`${request.method} timed out`));
        }, dispatchOptions.context?.requestTimeoutMs ?? timeoutMs);
        pending.set(id, { resolve, timer });
        const headers = dispatchOptions.context?.headers;
        transport.send({ jsonrpc: '2.0', id, method: request.method, params: request.params },
            headers === undefined ? {} : { headers })
            .catch((error) => { pending.delete(id); clearTimeout(timer); reject(error); });
    });
}

async function main() {
    const opts = options(process.argv.slice(2));
    const capabilities = { elicitation: { form: {} } };
    const clientInfo = { name: 'longcall-tasks-host', version: '1.0.0' };
    const versionNegotiation = opts.era === 'modern' ? { mode: { pin: MODERN } } : { mode: 'legacy' };
    const client = new Client(clientInfo, { capabilities, versionNegotiation });
    const transport = new StreamableHTTPClientTransport(new URL(opts.url));
    await client.connect(transport);
    const protocolVersion = client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? MODERN;
    const framing = opts.era === 'modern'
        ? { rawDispatch: rawChannel(transport, opts.timeoutMs), v2RequestFraming: { protocolVersion, clientInfo, clientCapabilities: capabilities } }
        : {};
    const session = createTaskSessionFromClient(client, {
        endpointId: opts.url,
        ...framing,
        onInputRequest: createApplicationInputHandler({
            elicitation: async (request) => {
                emit({ elicited: request.params });
                return { action: 'accept', content: opts.answer };
            },
            sampling: async () => { throw new Error('this host does not sample'); },
            roots: async () => ({ roots: [] }),
        }),
        onError: (error) => emit({ backgroundError: String(error) }),
    });
    emit({ connected: { era: client.getProtocolEra(), protocolVersion } });
    const { tools } = await client.listTools();
    const tool = tools.find((t) => t.name === opts.tool);
    if (tool === undefined) throw new Error(`the server lists no tool ${opts.tool}`);
    const execution = await session.callTool(opts.tool, opts.args, {
        declaration: toolDeclarationFromMcpTool(tool),
        task: { preference: 'require' },
        requestTimeoutMs: opts.timeoutMs,
    });
    emit({ execution: execution.kind, taskId: execution.handle?.taskId ?? null });
    let cancelSent = false;
    const { outcome } = await execution.settle({
        onEvent: async (event) => {
            if (event.type !== 'task') return;
            emit({ task: { taskId: event.task.taskId, status: event.task.status, statusMessage: event.task.statusMessage ?? null } });
            const message = event.task.statusMessage ?? '';
            if (opts.cancelOn !== null && !cancelSent && event.task.status === 'working' && message.includes(opts.cancelOn)) {
                cancelSent = true;
                await execution.cancel();
                emit({ cancelSent: true });
            }
        },
    });
    emit({ outcome: { status: outcome.status, result: outcome.result ?? null, error: outcome.error ? String(outcome.error.message) : null, code: outcome.error?.code ?? null } });
    await session.close();
    await client.close();
}

try {
    await main();
    process.exit(0);
} catch (error) {
    emit({ error: String(error?.stack ?? error) });
    process.exit(1);
}
