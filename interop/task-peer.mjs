// A peer MCP server built on the official TypeScript SDK (@modelcontextprotocol/sdk),
// serving task tools of the 2025-11-25 experimental tasks protocol over Streamable HTTP
// on 127.0.0.1. The tests in tests/interop drive it with the real `longcall` caller.
//
//   node task-peer.mjs [--stateless] [--event-store] [--port N] [--max-lifetime-s S]
//                      [--exit-with-stdin] [--retry-ms MS]
//
// Stateful (default): one session per `initialize` (Mcp-Session-Id), one McpServer and
// one transport per session, tasks bound to their session by the SDK's store. Stateless
// (--stateless): a fresh McpServer and transport per POST, as the SDK requires, over one
// shared task store. --event-store makes streams resumable the SDK's way: every event
// stream opens with a priming event (an id and empty data, SEP-1699) and a `retry:` field.
//
// It prints one JSON line `{"ready": true, "url": ...}` on stdout once it listens, then
// one JSON line per task execution event (`started`, `finished`, `cancelled`, `crashed`),
// so a test counts executions where the work runs, and one `http` line per HTTP exchange
// (verb, JSON-RPC method, Accept, session, status), so a failure shows the wire.
//
// Bounded: it exits on SIGTERM/SIGINT, when its parent process changes, with
// --exit-with-stdin when its stdin closes (the parent died), and after --max-lifetime-s
// (default 600) whatever happens. With --exit-with-stdin, stdin also carries the test's
// commands: a line {"open": "NAME"} lets every task waiting on gate NAME finish.
//
// Nothing here decides what the caller should do with an answer: every wire behaviour
// is the SDK's own, except the task store's answer to `tasks/result` for a task that
// failed with a JSON-RPC error (the spec requires that same error; the SDK's in-memory
// store can only hold a result), which PeerTaskStore adds through the SDK's TaskStore
// interface.

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { McpError, ErrorCode, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from '@modelcontextprotocol/sdk/experimental/tasks';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import * as z from 'zod/v4';

const { values: options } = parseArgs({
    options: {
        stateless: { type: 'boolean', default: false },
        'event-store': { type: 'boolean', default: false },
        port: { type: 'string', default: '0' },
        'max-lifetime-s': { type: 'string', default: '600' },
        'exit-with-stdin': { type: 'boolean', default: false },
        'retry-ms': { type: 'string', default: '200' }
    }
});
const STATEFUL = !options.stateless;
const POLL_INTERVAL_MS = 100;

function emit(event) {
    process.stdout.write(JSON.stringify(event) + '\n');
}

// --- the task store: SDK in-memory store + cancellation signal + JSON-RPC failures -------

class PeerTaskStore extends InMemoryTaskStore {
    constructor() {
        super();
        this.aborts = new Map(); // taskId -> AbortController of the running work
        this.errors = new Map(); // taskId -> the McpError the work failed with
    }

    watch(taskId) {
        const controller = new AbortController();
        this.aborts.set(taskId, controller);
        return controller.signal;
    }

    async updateTaskStatus(taskId, status, statusMessage, sessionId) {
        await super.updateTaskStatus(taskId, status, statusMessage, sessionId);
        if (status === 'cancelled') {
            // tasks/cancel (the SDK's handler) lands here: stop the work.
            this.aborts.get(taskId)?.abort();
        }
    }

    async failWithError(taskId, error, sessionId) {
        this.errors.set(taskId, error);
        await super.storeTaskResult(taskId, 'failed', { content: [] }, sessionId);
    }

    async getTaskResult(taskId, sessionId) {
        const result = await super.getTaskResult(taskId, sessionId);
        const error = this.errors.get(taskId);
        if (error) {
            // 2025-11-25: tasks/result answers "the same JSON-RPC error the underlying
            // request produced"; the SDK's handler turns this throw into that error.
            throw error;
        }
        return result;
    }
}

const taskStore = new PeerTaskStore();
const messageQueue = new InMemoryTaskMessageQueue();

function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted) return reject(new Error('cancelled'));
        const timer = setTimeout(resolve, ms);
        signal?.addEventListener(
            'abort',
            () => {
                clearTimeout(timer);
                reject(new Error('cancelled'));
            },
            { once: true }
        );
    });
}

// --- gates: work that ends only when the test lets it ------------------------------------
// A task given `gate: NAME` waits until the test writes the line {"open": "NAME"} to our
// stdin (or the task is cancelled), so a test that needs the task still working at some
// step makes that so instead of hoping a timer has not run out on a busy machine.

const gates = new Map(); // name -> { open: boolean, waiters: Set of resolve functions }

function gateNamed(name) {
    if (!gates.has(name)) gates.set(name, { open: false, waiters: new Set() });
    return gates.get(name);
}

function openGate(name) {
    const gate = gateNamed(name);
    gate.open = true;
    for (const resolve of gate.waiters) resolve();
    gate.waiters.clear();
    emit({ event: 'gate-opened', gate: name });
}

function passGate(name, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted) return reject(new Error('cancelled'));
        const gate = gateNamed(name);
        if (gate.open) return resolve();
        gate.waiters.add(resolve);
        signal?.addEventListener(
            'abort',
            () => {
                gate.waiters.delete(resolve);
                reject(new Error('cancelled'));
            },
            { once: true }
        );
    });
}

// A task tool: create the task, run `work` in the background, settle the task with what
// it returns (status + result) or with the JSON-RPC error it throws.
function taskTool(server, name, description, inputSchema, work, outputSchema) {
    server.experimental.tasks.registerToolTask(
        name,
        { description, inputSchema, outputSchema, execution: { taskSupport: 'required' } },
        {
            async createTask(args, extra) {
                const task = await extra.taskStore.createTask({
                    ttl: extra.taskRequestedTtl,
                    pollInterval: POLL_INTERVAL_MS
                });
                const signal = taskStore.watch(task.taskId);
                emit({ event: 'started', tool: name, taskId: task.taskId, tag: args.tag ?? null });
                run(server, name, task.taskId, args, extra, signal, work).catch(error =>
                    emit({ event: 'crashed', tool: name, taskId: task.taskId, message: String(error) })
                );
                return { task };
            },
            async getTask(_args, extra) {
                return await extra.taskStore.getTask(extra.taskId);
            },
            async getTaskResult(_args, extra) {
                return await extra.taskStore.getTaskResult(extra.taskId);
            }
        }
    );
}

async function run(server, name, taskId, args, extra, signal, work) {
    // In stateful mode the request's own store view also sends notifications/tasks/status
    // on the session; a stateless request is over once the CreateTaskResult is sent, so
    // the work settles the shared store directly (as the SDK's examples do).
    const store = STATEFUL ? extra.taskStore : taskStore;
    try {
        const { status, result } = await work({ args, signal, server, taskId, store });
        await store.storeTaskResult(taskId, status, result);
        emit({ event: 'finished', tool: name, taskId, status });
    } catch (error) {
        if (signal.aborted) {
            emit({ event: 'cancelled', tool: name, taskId });
            return;
        }
        if (error instanceof McpError) {
            await taskStore.failWithError(taskId, error);
            emit({ event: 'finished', tool: name, taskId, status: 'failed', error: error.code });
            return;
        }
        emit({ event: 'crashed', tool: name, taskId, message: String(error) });
        await store.storeTaskResult(taskId, 'failed', {
            content: [{ type: 'text', text: `Error: ${error}` }],
            isError: true
        });
    }
}

const tag = z.string().optional().describe('Free text echoed in the execution log.');

function buildServer() {
    const server = new McpServer(
        { name: 'longcall-ts-task-peer', version: '1.0.0' },
        {
            capabilities: {
                tools: {},
                tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } }
            },
            taskStore,
            taskMessageQueue: messageQueue
        }
    );

    taskTool(
        server,
        'slow_add',
        'Add two numbers after a delay (a task that completes with a result).',
        {
            a: z.number(),
            b: z.number(),
            ms: z.number().default(300),
            gate: z.string().optional().describe('Finish only once the test opens this gate.'),
            tag
        },
        async ({ args, signal }) => {
            await (args.gate === undefined ? sleep(args.ms, signal) : passGate(args.gate, signal));
            const sum = args.a + args.b;
            return {
                status: 'completed',
                result: { content: [{ type: 'text', text: String(sum) }], structuredContent: { sum } }
            };
        },
        { sum: z.number() }
    );

    taskTool(
        server,
        'tool_error',
        'End in a tool error (isError: true; the 2025-11-25 task status is failed).',
        { tag },
        async ({ signal }) => {
            await sleep(50, signal);
            return {
                status: 'failed',
                result: { content: [{ type: 'text', text: 'bad input (tool-level)' }], isError: true }
            };
        }
    );

    taskTool(
        server,
        'protocol_error',
        'Fail with a JSON-RPC error (tasks/result answers that error).',
        { tag },
        async ({ signal }) => {
            await sleep(50, signal);
            throw new McpError(ErrorCode.InternalError, 'upstream rate limit', { retryAfter: 5 });
        }
    );

    taskTool(
        server,
        'linger',
        'Run until cancelled (or for ms milliseconds).',
        { ms: z.number().default(60000), tag },
        async ({ args, signal }) => {
            await sleep(args.ms, signal);
            return { status: 'completed', result: { content: [{ type: 'text', text: 'done' }] } };
        }
    );

    taskTool(
        server,
        'ask_name',
        'Ask for a name by elicitation during the task, then greet.',
        { tag },
        async ({ server: mcp, taskId, store }) => {
            // The SDK's pattern (examples/server/simpleTaskInteractive): input_required,
            // then an elicitation/create queued for delivery on the tasks/result stream.
            await store.updateTaskStatus(taskId, 'input_required');
            const answer = await mcp.server.elicitInput(
                {
                    mode: 'form',
                    message: 'Please enter your name.',
                    requestedSchema: {
                        type: 'object',
                        properties: { name: { type: 'string' } },
                        required: ['name']
                    }
                },
                { relatedTask: { taskId } }
            );
            await store.updateTaskStatus(taskId, 'working');
            const name = answer.action === 'accept' ? answer.content?.name : null;
            return {
                status: 'completed',
                result: { content: [{ type: 'text', text: name ? `Hello, ${name}!` : 'No name given.' }] }
            };
        }
    );

    server.registerTool('shout', { description: 'A plain synchronous tool.', inputSchema: { text: z.string() } }, async ({ text }) => ({
        content: [{ type: 'text', text: text.toUpperCase() }]
    }));

    return server;
}

// --- HTTP -------------------------------------------------------------------------------

function transportOptions(extra) {
    if (!options['event-store']) return extra;
    return { ...extra, eventStore: new InMemoryEventStore(), retryInterval: Number(options['retry-ms']) };
}

function rpcError(res, status, code, message) {
    res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
}

const sessions = new Map(); // session id -> transport

async function statefulPost(req, res) {
    const sessionId = req.headers['mcp-session-id'];
    const existing = sessionId ? sessions.get(sessionId) : undefined;
    if (existing) return existing.handleRequest(req, res, req.body);
    if (sessionId) return rpcError(res, 404, -32001, 'Session not found');
    if (!isInitializeRequest(req.body)) return rpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');
    const transport = new StreamableHTTPServerTransport(
        transportOptions({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: id => sessions.set(id, transport)
        })
    );
    transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
    await buildServer().connect(transport);
    await transport.handleRequest(req, res, req.body);
}

async function statefulOther(req, res) {
    const transport = sessions.get(req.headers['mcp-session-id']);
    if (!transport) return rpcError(res, req.headers['mcp-session-id'] ? 404 : 400, -32000, 'No valid session');
    await transport.handleRequest(req, res);
}

async function statelessPost(req, res) {
    const server = buildServer();
    const transport = new StreamableHTTPServerTransport(transportOptions({ sessionIdGenerator: undefined }));
    res.on('close', () => {
        transport.close();
        server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
}

function methodNotAllowed(_req, res) {
    rpcError(res, 405, -32000, 'Method not allowed.');
}

function guarded(handler) {
    return async (req, res) => {
        try {
            await handler(req, res);
        } catch (error) {
            process.stderr.write(`request failed: ${error?.stack ?? error}\n`);
            if (!res.headersSent) rpcError(res, 500, -32603, 'Internal server error');
        }
    };
}

const app = createMcpExpressApp({ host: '127.0.0.1' });
// One trace line per HTTP exchange: what a test needs to diagnose a caller's failure.
app.use((req, res, next) => {
    const body = req.body;
    res.on('finish', () =>
        emit({
            event: 'http',
            verb: req.method,
            rpc: Array.isArray(body) ? 'batch' : (body?.method ?? (body?.id !== undefined ? 'response' : null)),
            id: body?.id ?? null,
            accept: req.headers.accept ?? null,
            session: req.headers['mcp-session-id'] ?? null,
            lastEventId: req.headers['last-event-id'] ?? null,
            status: res.statusCode,
            contentType: res.getHeader('content-type') ?? null
        })
    );
    next();
});
if (STATEFUL) {
    app.post('/mcp', guarded(statefulPost));
    app.get('/mcp', guarded(statefulOther));
    app.delete('/mcp', guarded(statefulOther));
} else {
    app.post('/mcp', guarded(statelessPost));
    app.get('/mcp', methodNotAllowed);
    app.delete('/mcp', methodNotAllowed);
}

const listener = app.listen(Number(options.port), '127.0.0.1', error => {
    if (error) {
        process.stderr.write(`cannot listen: ${error}\n`);
        process.exit(1);
    }
    const { port } = listener.address();
    emit({ ready: true, url: `http://127.0.0.1:${port}/mcp`, stateful: STATEFUL, eventStore: options['event-store'] });
});

// --- bounded lifetime -------------------------------------------------------------------

function shutdown(code) {
    listener.closeAllConnections?.();
    listener.close();
    process.exit(code);
}
process.on('SIGTERM', () => shutdown(0));
process.on('SIGINT', () => shutdown(0));
if (options['exit-with-stdin']) {
    // The test holds our stdin open: when it dies, the pipe closes and so do we.
    // Each line it writes is a JSON command: {"open": "NAME"} opens a gate.
    let pending = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', chunk => {
        pending += chunk;
        let newline;
        while ((newline = pending.indexOf('\n')) >= 0) {
            const line = pending.slice(0, newline);
            pending = pending.slice(newline + 1);
            try {
                const command = JSON.parse(line);
                if (typeof command.open === 'string') openGate(command.open);
            } catch (error) {
                process.stderr.write(`bad command on stdin: ${line}\n`);
            }
        }
    });
    process.stdin.on('end', () => shutdown(0));
    process.stdin.on('close', () => shutdown(0));
    process.stdin.resume();
}
const parent = process.ppid;
setInterval(() => process.ppid !== parent && shutdown(0), 500).unref();
setTimeout(() => shutdown(3), Number(options['max-lifetime-s']) * 1000).unref();
