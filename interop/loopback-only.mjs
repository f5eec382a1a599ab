// Preloaded into Node tools the tests run (NODE_OPTIONS=--import=<this file>): every server
// socket listens on 127.0.0.1 only. The conformance suite's mock servers call
// `listen(0)` without a host, which Node binds to every interface; a test must not
// open a port beyond the loopback interface. Clients still reach them as
// http://localhost:<port>, which resolves to 127.0.0.1.

import dns from 'node:dns';
import net from 'node:net';

const LOOPBACK = '127.0.0.1';
const WILDCARDS = new Set([undefined, null, '', '0.0.0.0', '::', 'localhost']);
const listen = net.Server.prototype.listen;
const lookup = dns.lookup;
let listening = false;

// `listen(0)` without a host binds at once, and callers read `server.address().port` on
// the next line; with a host, Node first resolves it through dns.lookup, which answers
// on a later tick even for an address literal. Inside our own listen call, resolving the
// loopback literal answers at once, so the rewritten call behaves like the original.
dns.lookup = function (hostname, options, callback) {
    if (listening && hostname === LOOPBACK) {
        const done = typeof options === 'function' ? options : callback;
        if (typeof options === 'object' && options?.all) done(null, [{ address: LOOPBACK, family: 4 }]);
        else done(null, LOOPBACK, 4);
        return {};
    }
    return lookup.apply(this, arguments);
};

net.Server.prototype.listen = function (...args) {
    listening = true;
    try {
        return loopbackListen.apply(this, args);
    } finally {
        listening = false;
    }
};

function loopbackListen(...args) {
    const [first] = args;
    if (first !== null && typeof first === 'object' && !Array.isArray(first)) {
        // listen(options[, callback]); a path (a Unix socket) or a handle is left alone.
        if (first.path === undefined && first.handle === undefined && first.fd === undefined && WILDCARDS.has(first.host)) {
            args[0] = { ...first, host: LOOPBACK };
        }
        return listen.apply(this, args);
    }
    if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) {
        // listen(port[, host][, backlog][, callback])
        if (typeof args[1] === 'string' || args[1] === undefined || args[1] === null) {
            if (WILDCARDS.has(args[1])) args[1] = LOOPBACK;
        } else {
            args.splice(1, 0, LOOPBACK);
        }
        return listen.apply(this, args);
    }
    if (typeof first === 'function' || first === undefined) {
        // listen([callback]): a random port on every interface by default.
        return listen.call(this, 0, LOOPBACK, ...args);
    }
    return listen.apply(this, args);
}
