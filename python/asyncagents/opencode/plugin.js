// asyncagents: background sub-agent tasks for OpenCode (the Python package asyncagents,
// installed from a clone of its repository or from a wheel its CI builds).
// Written by `asyncagents opencode install`; run it again to change the settings below.
// Each tool forwards the call (with the calling session's id and agent) to the asyncagents
// service (`asyncagents serve`) and returns its text. The service validates the arguments.
import { readFile } from "node:fs/promises"
import { tool } from "@opencode-ai/plugin"

const CONFIG = /* asyncagents-config */ {} /* end */

const z = tool.schema

/** The zod schema of one property of a tool's JSON Schema (the types the tools use). */
function property(spec, required) {
  let schema
  if (Array.isArray(spec.anyOf) && spec.anyOf.length > 1) {
    // e.g. fork_turns: "all" or a whole number
    const [first, second, ...rest] = spec.anyOf.map((option) => property(option, true))
    schema = z.union([first, second, ...rest])
  } else if (Array.isArray(spec.enum)) schema = z.enum(spec.enum)
  else if (spec.type === "boolean") schema = z.boolean()
  else if (spec.type === "integer" || spec.type === "number") {
    schema = spec.type === "integer" ? z.number().int() : z.number()
    if (typeof spec.minimum === "number") schema = schema.min(spec.minimum)
    if (typeof spec.exclusiveMinimum === "number") schema = schema.gt(spec.exclusiveMinimum)
    if (typeof spec.maximum === "number") schema = schema.max(spec.maximum)
  } else schema = z.string()
  if (spec.description) schema = schema.describe(spec.description)
  return required ? schema : schema.optional()
}

function args(parameters) {
  const required = new Set(parameters.required ?? [])
  const out = {}
  for (const [name, spec] of Object.entries(parameters.properties ?? {})) {
    out[name] = property(spec, required.has(name))
  }
  return out
}

function flag(value) {
  return value === true || String(value).toLowerCase() === "true"
}

/** How long to wait for the service: a blocking output waits up to its own timeout. */
function deadlineMs(name, input) {
  let ms = CONFIG.timeoutMs
  if (name === "asyncagents_output" && input && flag(input.block)) {
    const asked = Number(input.timeout ?? CONFIG.defaultOutputTimeout)
    const seconds = Number.isFinite(asked) && asked >= 0 && asked <= 600 ? asked : 600
    ms += seconds * 1000
  }
  return ms
}

async function readToken() {
  try {
    return (await readFile(CONFIG.tokenFile, "utf8")).trim()
  } catch (error) {
    const missing = new Error(
      `Error: no service token at ${CONFIG.tokenFile} (${error.code ?? error.message}). Start ` +
        "the service with `asyncagents serve --opencode <this OpenCode server's URL>`: it " +
        "creates the token on its first start.",
    )
    missing.text = missing.message
    throw missing
  }
}

/** The body of a response, at most `limit` bytes. */
async function readCapped(response, limit) {
  if (!response.body) return ""
  const reader = response.body.getReader()
  const chunks = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > limit) {
      await reader.cancel()
      throw new Error(`the answer is over ${limit} bytes`)
    }
    chunks.push(value)
  }
  return new TextDecoder().decode(Buffer.concat(chunks))
}

async function call(name, input, context) {
  if (context.abort?.aborted) return "Error: the call was aborted."
  const url = `${CONFIG.serviceUrl}/v1/tools/${name}`
  const limitMs = deadlineMs(name, input)
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(new Error("timeout")), limitMs)
  const stop = () => controller.abort(new Error("aborted"))
  context.abort?.addEventListener?.("abort", stop, { once: true })
  try {
    const token = await readToken()
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({
        session_id: context.sessionID,
        agent: context.agent ?? null,
        arguments: input ?? {},
      }),
      signal: controller.signal,
    })
    const body = await readCapped(response, CONFIG.maxAnswerBytes)
    let answer
    try {
      answer = JSON.parse(body)
    } catch {
      answer = {}
    }
    if (response.ok && typeof answer.text === "string") return answer.text
    if (response.status === 401) {
      return (
        `Error: the asyncagents service at ${CONFIG.serviceUrl} refused the token in ` +
        `${CONFIG.tokenFile} (HTTP 401). Restart the service as the same user as OpenCode, ` +
        "or run `asyncagents opencode install` again."
      )
    }
    const detail = answer.detail ?? body.slice(0, 300)
    return `Error: the asyncagents service at ${CONFIG.serviceUrl} answered HTTP ${response.status}: ${detail}`
  } catch (error) {
    if (typeof error?.text === "string") return error.text
    if (controller.signal.aborted && controller.signal.reason?.message === "aborted") {
      return "Error: the call was aborted."
    }
    if (controller.signal.aborted) {
      return (
        `Error: the asyncagents service at ${CONFIG.serviceUrl} did not answer within ` +
        `${Math.round(limitMs / 1000)} s. Check that \`asyncagents serve\` is running, then ` +
        "call the tool again (a task you started may exist already: see asyncagents_list)."
      )
    }
    const reason = error?.cause?.code ?? error?.code ?? error?.message ?? String(error)
    return (
      `Error: the asyncagents service at ${CONFIG.serviceUrl} is not reachable (${reason}). ` +
      "Start it with `asyncagents serve --opencode <this OpenCode server's URL>`, then call " +
      "the tool again."
    )
  } finally {
    clearTimeout(timer)
    context.abort?.removeEventListener?.("abort", stop)
  }
}

// -- toasts: a TUI toast when a task of a session that used these tools ends -----------------
// The plugin follows the service's event stream (GET /v1/events, the dashboard's), from the
// first tool call on, and resumes it with Last-Event-ID after a drop. Only tasks of sessions
// that called a tool through this OpenCode process are shown. Failures here never reach a tool.
//
// Each ended turn of a task (its id and turn) gets one toast, whichever way the plugin learns of
// it: a live event, the backlog the service replays after Last-Event-ID, or the `snapshot` it
// sends instead when it cannot replay (a restarted service). From a snapshot, a task is toasted
// when it ended since the plugin last saw it running, or when the plugin never saw it and it
// changed after the previous snapshot. A tool call while the stream is down reconnects it at
// once (the service answered, so it is up).
const TOAST_KINDS = {
  "task.completed": ["success", "completed"],
  "task.error": ["error", "failed"],
  "task.cancelled": ["warning", "was cancelled"],
}
const STATUS_KINDS = { completed: "task.completed", error: "task.error", cancelled: "task.cancelled" }
const ACTIVE = new Set(["queued", "running", "resumed"])
const TOAST_MAX_EVENT_BYTES = 8 * 1024 * 1024
/** how many tasks the plugin remembers (the oldest are forgotten first) */
const TOAST_MEMORY = 10000
const toast = {
  client: null,
  sessions: new Set(),
  following: false,
  lastId: null,
  connected: false,
  /** ends the wait before the next reconnect (set while waiting) */
  wake: null,
  /** the service's time (ms) of the last snapshot (at first: when the plugin began to
   * watch): every task stored before it was seen; one changed after it and unknown is news */
  seenUntil: null,
  /** task id -> { status, turn } as last seen */
  known: new Map(),
  /** "<task id>:<turn>" of every turn end toasted */
  shown: new Set(),
}

function remember(collection, key, value) {
  collection.delete(key)
  if (collection instanceof Map) collection.set(key, value)
  else collection.add(key)
  while (collection.size > TOAST_MEMORY) collection.delete(collection.keys().next().value)
}

function watchTasksOf(sessionID) {
  if (!toast.client?.tui?.showToast || typeof sessionID !== "string") return
  toast.sessions.add(sessionID)
  if (toast.following) {
    reconnectNow()
    return
  }
  toast.following = true
  toast.seenUntil = Date.now()
  followTasks().catch(() => {})
}

/** Cut the wait before the next reconnect short, if the stream is down. */
function reconnectNow() {
  if (!toast.connected && toast.wake) toast.wake()
}

async function showTaskToast(kind, task) {
  const [variant, verb] = TOAST_KINDS[kind]
  const what = task.description || task.id
  await toast.client.tui.showToast({
    body: {
      title: "asyncagents",
      message: `Background task "${what}" ${verb} (${task.id}).`,
      variant,
      duration: 6000,
    },
  })
}

/** Toast one ended turn, unless it was toasted already. */
function toastOnce(kind, task) {
  const key = `${task.id}:${task.turn}`
  if (toast.shown.has(key)) return
  remember(toast.shown, key, true)
  showTaskToast(kind, task).catch(() => {})
}

function see(task) {
  remember(toast.known, task.id, { status: task.status, turn: task.turn })
}

function onTaskEvent(kind, data) {
  if (kind === "snapshot") return onSnapshot(JSON.parse(data))
  if (!kind.startsWith("task.") || kind === "task.cleared") return
  const task = JSON.parse(data)
  if (!toast.sessions.has(task.parent_session_id)) return
  see(task)
  if (kind in TOAST_KINDS) toastOnce(kind, task)
}

/** A snapshot of every task (a new stream the service could not resume): toast the turns that
 * ended while the plugin was not listening. */
function onSnapshot(snapshot) {
  const since = toast.seenUntil
  for (const task of snapshot.tasks ?? []) {
    if (!toast.sessions.has(task.parent_session_id)) continue
    const kind = STATUS_KINDS[task.status]
    const before = toast.known.get(task.id)
    const ended = before
      ? ACTIVE.has(before.status) || before.turn < task.turn
      : since !== null && task.updated_at > since
    see(task)
    if (kind && ended) toastOnce(kind, task)
  }
  if (typeof snapshot.now_ms === "number") toast.seenUntil = snapshot.now_ms
}

/** Read one connection of the stream; a silent one (no heartbeat for 60 s) is dropped. */
async function readTaskEvents(response, controller) {
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  let silence = setTimeout(() => controller.abort(), 60000)
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      clearTimeout(silence)
      silence = setTimeout(() => controller.abort(), 60000)
      buffer += decoder.decode(value, { stream: true })
      if (buffer.length > TOAST_MAX_EVENT_BYTES) throw new Error("event too large")
      let cut
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut)
        buffer = buffer.slice(cut + 2)
        let id = null
        let kind = ""
        let data = ""
        for (const line of block.split("\n")) {
          if (line.startsWith("id: ")) id = line.slice(4)
          else if (line.startsWith("event: ")) kind = line.slice(7)
          else if (line.startsWith("data: ")) data += line.slice(6)
        }
        if (data) {
          try {
            onTaskEvent(kind, data)
          } catch {
            // an event the plugin cannot read: skip it, keep the stream
          }
        }
        if (id !== null) toast.lastId = id
      }
    }
  } finally {
    clearTimeout(silence)
  }
}

/** Wait `ms`, or less when `reconnectNow` is called meanwhile. */
function pause(ms) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      toast.wake = null
      resolve()
    }
    const timer = setTimeout(done, ms)
    toast.wake = done
  })
}

async function followTasks() {
  let retryMs = 1000
  for (;;) {
    const controller = new AbortController()
    try {
      const headers = { authorization: `Bearer ${await readToken()}`, accept: "text/event-stream" }
      if (toast.lastId !== null) headers["last-event-id"] = toast.lastId
      const response = await fetch(`${CONFIG.serviceUrl}/v1/events`, {
        headers,
        signal: controller.signal,
      })
      if (response.ok && response.body) {
        retryMs = 1000
        toast.connected = true
        await readTaskEvents(response, controller)
      }
    } catch {
      // the service is down or restarting: try again later (or at the next tool call)
    } finally {
      toast.connected = false
    }
    controller.abort()
    await pause(retryMs)
    retryMs = Math.min(retryMs * 2, 30000)
  }
}

export const AsyncAgentsPlugin = async (plugin) => {
  toast.client = plugin?.client ?? null
  const tools = {}
  for (const definition of CONFIG.tools) {
    tools[definition.name] = tool({
      description: definition.description,
      args: args(definition.parameters),
      execute: async (input, context) => {
        watchTasksOf(context?.sessionID)
        try {
          return await call(definition.name, input, context)
        } finally {
          reconnectNow()
        }
      },
    })
  }
  return { tool: tools }
}
