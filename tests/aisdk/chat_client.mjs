// The AI SDK's real chat engine (`AbstractChat` of the `ai` package, what `useChat` wraps),
// driven without React by a JSON script, for the tests of the AI SDK mode.
//
// Usage: node chat_client.mjs '<script json>'   (or the script on stdin)
//
// Script: {
//   "api": "http://127.0.0.1:PORT/api/chat",   the transport's `api` (POST; resume GETs
//                                               <api>/<chat id>/stream)
//   "chat_id": "c1",                            the chat id (`id` in the request body)
//   "body": {...},                              optional extra body fields
//   "prepare_send": "<js>",                     optional: the transport's
//                                               prepareSendMessagesRequest, as the source
//                                               of a function expression (docs/web.md's)
//   "canned": [sse text | {"status", "body"}],  optional: answer each request with these,
//                                               in order, instead of the network
//   "timeout_ms": 15000,                        bound of every wait
//   "actions": [...]
// }
// Actions ("do"):
//   send {text}              sendMessage({text}); not awaited (use wait)
//   wait {until?, contains?, expect?}
//       until "idle" (default): no request in flight; then the status must be `expect`
//       ("ready" by default, "error", or "any"); until "streaming": a part arrived;
//       until "text": the last message's text contains `contains`
//   approve {id?, approved, reason?, forge?}
//       addToolApprovalResponse; no id: the first pending request's; forge: first
//       rewrite that pending request's id to `id` (a client lying about it)
//   stop                     chat.stop(): aborts the fetch
//   resume                   chat.resumeStream(); not awaited
//   reload {keep?}           the page reloads: this chat is stopped, a new one with the
//                            same id starts with "none" (default), "all", or "user"
//                            (through the last user message) of the messages
//   print {label}            a checkpoint line
// Output: one JSON line per checkpoint, {label, status, error, errors, messages, data,
// requests, tool_calls (the toolCallId of each onToolCall, in order)}, and a last one
// labelled "end". Exit codes: 0 fine, 1 the chat ended in an
// unexpected error (the line is labelled "unexpected"), 2 a bad script or a crash,
// 3 a wait timed out.

import { readFileSync } from "node:fs";
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";

class ScriptError extends Error {}
class WaitTimeout extends Error {}

/** A minimal in-memory ChatState that tells its listeners about every change. */
class MemoryChatState {
  constructor(messages, onChange) {
    this._messages = messages;
    this._status = "ready";
    this._error = undefined;
    this._onChange = onChange;
  }
  get status() {
    return this._status;
  }
  set status(value) {
    this._status = value;
    this._onChange();
  }
  get error() {
    return this._error;
  }
  set error(value) {
    this._error = value;
    this._onChange();
  }
  get messages() {
    return this._messages;
  }
  set messages(value) {
    this._messages = [...value];
    this._onChange();
  }
  pushMessage = (message) => {
    this._messages = this._messages.concat(message);
    this._onChange();
  };
  popMessage = () => {
    this._messages = this._messages.slice(0, -1);
    this._onChange();
  };
  replaceMessage = (index, message) => {
    this._messages = [
      ...this._messages.slice(0, index),
      this.snapshot(message),
      ...this._messages.slice(index + 1),
    ];
    this._onChange();
  };
  snapshot = (thing) => structuredClone(thing);
}

/** AbstractChat, counting the requests in flight (automatic sends included). */
class ScriptChat extends AbstractChat {
  constructor(options, onChange) {
    super(options);
    this.inFlight = 0;
    this._notify = onChange;
  }
  async makeRequest(options) {
    this.inFlight++;
    this._notify();
    try {
      return await super.makeRequest(options);
    } finally {
      this.inFlight--;
      this._notify();
    }
  }
}

/** Runs one script; keeps what the checkpoints print. */
class Driver {
  constructor(script) {
    this.script = script;
    this.timeoutMs = script.timeout_ms ?? 15000;
    this.errors = [];
    this.data = [];
    this.requests = [];
    this.toolCalls = [];
    this.pending = new Set();
    this.waiters = new Set();
    this.canned = Array.isArray(script.canned) ? [...script.canned] : null;
    this.chat = this.newChat([]);
  }

  newChat(messages) {
    const changed = () => this.changed();
    const transport = new DefaultChatTransport({
      api: this.script.api ?? "http://127.0.0.1:9/api/chat",
      body: this.script.body,
      fetch: (url, init) => this.fetch(url, init),
      ...(typeof this.script.prepare_send === "string"
        ? { prepareSendMessagesRequest: evaluate(this.script.prepare_send) }
        : {}),
    });
    return new ScriptChat(
      {
        id: this.script.chat_id,
        transport,
        state: new MemoryChatState(messages, changed),
        sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
        onError: (error) => this.errors.push(String(error?.message ?? error)),
        onData: (part) => this.data.push(part),
        onToolCall: ({ toolCall }) => {
          this.toolCalls.push(toolCall.toolCallId);
        },
      },
      changed,
    );
  }

  async fetch(url, init = {}) {
    const method = init.method ?? "GET";
    const body = typeof init.body === "string" ? JSON.parse(init.body) : null;
    this.requests.push({ method, url: String(url), body });
    if (this.canned === null) {
      return fetch(url, init);
    }
    const next = this.canned.shift();
    if (next === undefined) {
      return new Response("no canned response left", { status: 500 });
    }
    if (typeof next === "string") {
      return new Response(next, {
        status: 200,
        headers: { "content-type": "text/event-stream" },
      });
    }
    return new Response(next.status === 204 ? null : (next.body ?? ""), {
      status: next.status,
    });
  }

  changed() {
    for (const waiter of [...this.waiters]) {
      waiter();
    }
  }

  /** Resolves once `predicate()` holds; rejects after the script's timeout. */
  waitFor(predicate, what) {
    return new Promise((resolve, reject) => {
      let timer;
      const check = () => {
        if (predicate()) {
          clearTimeout(timer);
          this.waiters.delete(check);
          resolve();
        }
      };
      timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new WaitTimeout(`timed out after ${this.timeoutMs} ms waiting for ${what}`));
      }, this.timeoutMs);
      this.waiters.add(check);
      check();
    });
  }

  /** Run an action's promise in the background; the next idle wait awaits it. */
  track(promise) {
    const tracked = promise
      .catch((error) => this.errors.push(String(error?.message ?? error)))
      .finally(() => {
        this.pending.delete(tracked);
        this.changed();
      });
    this.pending.add(tracked);
  }

  idle() {
    return this.pending.size === 0 && this.chat.inFlight === 0;
  }

  lastText() {
    const last = this.chat.messages[this.chat.messages.length - 1];
    if (last?.role !== "assistant") {
      return "";
    }
    return last.parts
      .filter((part) => part.type === "text")
      .map((part) => part.text)
      .join("");
  }

  pendingApproval() {
    for (const message of this.chat.messages) {
      for (const part of message.parts) {
        if (part.state === "approval-requested" && part.approval) {
          return part;
        }
      }
    }
    return null;
  }

  checkpoint(label) {
    const chat = this.chat;
    return {
      label,
      status: chat.status,
      error: chat.error ? String(chat.error.message ?? chat.error) : null,
      errors: [...this.errors],
      messages: structuredClone(chat.messages),
      data: structuredClone(this.data),
      requests: structuredClone(this.requests),
      tool_calls: [...this.toolCalls],
    };
  }

  async run() {
    for (const action of this.script.actions ?? []) {
      const stop = await this.step(action);
      if (stop) {
        return 1;
      }
    }
    await this.waitFor(() => this.idle(), "the last requests to end");
    print(this.checkpoint("end"));
    return 0;
  }

  /** One action; true if the chat ended in an unexpected error. */
  async step(action) {
    switch (action.do) {
      case "send":
        this.track(this.chat.sendMessage({ text: String(action.text) }));
        return false;
      case "resume":
        this.track(this.chat.resumeStream());
        return false;
      case "wait":
        return this.wait(action);
      case "approve":
        await this.approve(action);
        return false;
      case "stop":
        await this.chat.stop();
        return false;
      case "reload":
        await this.reload(action.keep ?? "none");
        return false;
      case "print":
        print(this.checkpoint(String(action.label ?? "checkpoint")));
        return false;
      default:
        throw new ScriptError(`unknown action ${JSON.stringify(action)}`);
    }
  }

  async wait(action) {
    const until = action.until ?? "idle";
    if (until === "streaming") {
      await this.waitFor(() => this.chat.status === "streaming", "status streaming");
      return false;
    }
    if (until === "text") {
      const wanted = String(action.contains ?? "");
      await this.waitFor(() => this.lastText().includes(wanted), `text ${JSON.stringify(wanted)}`);
      return false;
    }
    if (until !== "idle") {
      throw new ScriptError(`unknown wait ${JSON.stringify(until)}`);
    }
    await this.waitFor(() => this.idle(), "no request in flight");
    const expect = action.expect ?? "ready";
    if (expect !== "any" && this.chat.status !== expect) {
      print(this.checkpoint("unexpected"));
      return true;
    }
    return false;
  }

  async approve(action) {
    const part = this.pendingApproval();
    if (part === null) {
      throw new ScriptError("approve: no approval request is pending");
    }
    let id = action.id ?? part.approval.id;
    if (action.forge) {
      // what a tampering client could send: the message rewritten with another id
      const index = this.chat.messages.findIndex((m) => m.parts.includes(part));
      const message = structuredClone(this.chat.messages[index]);
      for (const p of message.parts) {
        if (p.toolCallId === part.toolCallId) {
          p.approval = { ...p.approval, id };
        }
      }
      this.chat.messages = this.chat.messages.map((m, i) => (i === index ? message : m));
    } else if (action.id !== undefined && action.id !== part.approval.id) {
      throw new ScriptError(`approve: no pending request ${action.id} (use forge)`);
    }
    await this.chat.addToolApprovalResponse({
      id,
      approved: Boolean(action.approved ?? true),
      ...(action.reason !== undefined ? { reason: String(action.reason) } : {}),
    });
  }

  async reload(keep) {
    await this.chat.stop(); // the page goes away: its fetch is aborted
    let messages = [];
    if (keep === "all") {
      messages = structuredClone(this.chat.messages);
    } else if (keep === "user") {
      const all = this.chat.messages;
      const last = all.findLastIndex((m) => m.role === "user");
      messages = structuredClone(all.slice(0, last + 1));
    } else if (keep !== "none") {
      throw new ScriptError(`reload: keep is "none", "all" or "user", not ${keep}`);
    }
    this.errors = [];
    this.data = [];
    this.chat = this.newChat(messages);
  }
}

/** A function expression's source (from the docs) as the function. */
function evaluate(source) {
  const made = new Function(`return (${source});`)();
  if (typeof made !== "function") {
    throw new ScriptError("prepare_send must be the source of a function expression");
  }
  return made;
}

function print(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

function readScript() {
  const text = process.argv[2] ?? readFileSync(0, "utf8");
  const script = JSON.parse(text);
  if (typeof script !== "object" || script === null || typeof script.chat_id !== "string") {
    throw new ScriptError('the script must be a JSON object with a string "chat_id"');
  }
  return script;
}

async function main() {
  let driver;
  try {
    driver = new Driver(readScript());
    process.exitCode = await driver.run();
  } catch (error) {
    const timeout = error instanceof WaitTimeout;
    print({
      label: timeout ? "timeout" : "crash",
      message: String(error?.stack ?? error),
      ...(driver ? { state: driver.checkpoint("at failure") } : {}),
    });
    process.exitCode = timeout ? 3 : 2;
  } finally {
    await driver?.chat.stop().catch(() => {});
  }
}

await main();
