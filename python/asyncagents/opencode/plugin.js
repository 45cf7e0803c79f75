// asyncagents: background sub-agent tasks for OpenCode (https://pypi.org/project/asyncagents).
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
const TOAST_KINDS = {
  "task.completed": ["success", "completed"],
  "task.error": ["error", "failed"],
  "task.cancelled": ["warning", "was cancelled"],
}
const TOAST_MAX_EVENT_BYTES = 8 * 1024 * 1024
const toast = { client: null, sessions: new Set(), following: false, lastId: null }

function watchTasksOf(sessionID) {
  if (!toast.client?.tui?.showToast || typeof sessionID !== "string") return
  toast.sessions.add(sessionID)
  if (toast.following) return
  toast.following = true
  followTasks().catch(() => {})
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

function onTaskEvent(kind, data) {
  if (!(kind in TOAST_KINDS)) return
  const task = JSON.parse(data)
  if (!toast.sessions.has(task.parent_session_id)) return
  showTaskToast(kind, task).catch(() => {})
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
        if (data) onTaskEvent(kind, data)
        if (id !== null) toast.lastId = id
      }
    }
  } finally {
    clearTimeout(silence)
  }
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
        await readTaskEvents(response, controller)
      }
    } catch {
      // the service is down or restarting: try again later
    }
    controller.abort()
    await new Promise((resolve) => setTimeout(resolve, retryMs))
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
      execute: (input, context) => {
        watchTasksOf(context?.sessionID)
        return call(definition.name, input, context)
      },
    })
  }
  return { tool: tools }
}
