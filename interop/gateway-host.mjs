// An MCP host on the official TypeScript SDK client, against `longcall gateway`
// (run by tests/gateway/test_hosts.py on the interop Node; it lives here to find the SDK).
//
//   node gateway-host.mjs plain URL TOOL ARGS_JSON SHORT_TIMEOUT_S
//       task-unaware: the call once with a short timeout (it times out), the retry with
//       the SDK's default request timeout (60 s), then what `next` names until the result.
//   node gateway-host.mjs once URL TOOL ARGS_JSON
//       task-unaware: the call once with the SDK's default request timeout, then what
//       `next` names until the result; a refused call is printed as {error}.
//   node gateway-host.mjs tasks URL TOOL ARGS_JSON TIMEOUT_S
//       task-aware: client.experimental.tasks.callToolStream with a task (2025-11-25);
//       it answers a form (elicitation) by accepting it with {approved: true}.
//
// One JSON line per step on stdout. Bounded: at most FOLLOW_MAX follow-ups, and it exits
// after MAX_LIFETIME_MS whatever happens.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const FOLLOW_MAX = 40;
const MAX_LIFETIME_MS = 600_000;
setTimeout(() => { emit({ error: 'lifetime over' }); process.exit(3); }, MAX_LIFETIME_MS).unref();

const [mode, url, tool, rawArgs, seconds] = process.argv.slice(2);
const args = JSON.parse(rawArgs);

function emit(event) {
    process.stdout.write(JSON.stringify(event) + '\n');
}

async function connect() {
    const client = new Client(
        { name: 'ts-host', version: '1.0.0' },
        { capabilities: mode === 'tasks' ? { elicitation: { form: {} } } : {} }
    );
    if (mode === 'tasks') {
        client.setRequestHandler(ElicitRequestSchema, async (request) => {
            emit({ elicited: request.params });
            return { action: 'accept', content: { approved: true } };
        });
    }
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    return client;
}

async function plain() {
    const impatient = await connect();
    try {
        await impatient.callTool({ name: tool, arguments: args }, undefined, { timeout: Number(seconds) * 1000 });
        emit({ attempt: 1, timed_out: false });
    } catch (error) {
        emit({ attempt: 1, timed_out: true, error: String(error) });
    }
    await impatient.close();
    const client = await connect();
    const began = Date.now();
    const answer = await client.callTool({ name: tool, arguments: args });
    emit({ attempt: 2, early: answer, took_s: (Date.now() - began) / 1000 });
    return await followNext(client, answer);
}

async function once() {
    const client = await connect();
    let answer;
    try {
        answer = await client.callTool({ name: tool, arguments: args });
    } catch (error) {
        emit({ error: String(error) });
        await client.close();
        return 1;
    }
    emit({ attempt: 1, early: answer });
    return await followNext(client, answer);
}

async function followNext(client, first) {
    let answer = first;
    for (let i = 0; i < FOLLOW_MAX; i++) {
        const next = answer.structuredContent?.next;
        if (!next) {
            emit({ result: answer });
            await client.close();
            return 0;
        }
        answer = await client.callTool({ name: next.tool, arguments: next.arguments });
        emit({ followed: next.tool, answer });
    }
    emit({ error: 'no result after following next' });
    return 1;
}

async function tasks() {
    const client = await connect();
    const stream = client.experimental.tasks.callToolStream(
        { name: tool, arguments: args },
        undefined,
        { task: { ttl: 600_000 }, timeout: Number(seconds) * 1000 }
    );
    for await (const message of stream) {
        if (message.type === 'taskCreated') emit({ taskCreated: message.task });
        else if (message.type === 'taskStatus') emit({ taskStatus: message.task });
        else if (message.type === 'result') { emit({ result: message.result }); await client.close(); return 0; }
        else if (message.type === 'error') { emit({ error: String(message.error) }); return 1; }
    }
    emit({ error: 'the stream ended without a result' });
    return 1;
}

const code = await ({ tasks, once, plain }[mode])();
process.exit(code);
