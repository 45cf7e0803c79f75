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
  if (Array.isArray(spec.enum)) schema = z.enum(spec.enum)
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

export const AsyncAgentsPlugin = async () => {
  const tools = {}
  for (const definition of CONFIG.tools) {
    tools[definition.name] = tool({
      description: definition.description,
      args: args(definition.parameters),
      execute: (input, context) => call(definition.name, input, context),
    })
  }
  return { tool: tools }
}
