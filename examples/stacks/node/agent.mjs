// A support agent on the official Node `openai` package: the SDK's own tool runner
// (`chat.completions.runTools`), once plain and once streamed, as its README shows.
//
// forkpoint points it at the proxy with OPENAI_BASE_URL, which the SDK reads; nothing here
// names forkpoint. Prints what the agent saw as one JSON line.
import OpenAI from "openai";

const client = new OpenAI({ maxRetries: 0 });

function lookup_order({ order_id }) {
  return `order ${order_id}: delivered, 2 pairs of shoes, $80`;
}

function issue_refund({ order_id }) {
  return `refund R-${order_id} issued`;
}

const tools = [lookup_order, issue_refund].map((fn) => ({
  type: "function",
  function: {
    function: fn,
    parse: JSON.parse,
    description: fn.name.replace("_", " "),
    parameters: {
      type: "object",
      properties: { order_id: { type: "string" } },
      required: ["order_id"],
    },
  },
}));

async function run(stream) {
  const runner = client.chat.completions.runTools({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Please refund order A1001, the shoes don't fit." }],
    tools,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
  const chunks = [];
  const completions = [];
  if (stream) runner.on("chunk", (chunk) => chunks.push(chunk));
  else runner.on("chatCompletion", (completion) => completions.push(completion));
  const final_output = await runner.finalContent();
  return { final_output, completions, chunks, messages: runner.messages };
}

const seen = { plain: await run(false), stream: await run(true) };
process.stdout.write(JSON.stringify(seen));
