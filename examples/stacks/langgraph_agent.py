"""A ReAct-style support agent on LangGraph with langchain-openai, built as LangGraph's docs show:
a model node with tools bound, a `ToolNode`, and `tools_condition` looping between them.

forkpoint points it at the proxy with `OPENAI_BASE_URL` (and `OPENAI_API_BASE`, which
LangChain reads first); nothing here names forkpoint. The graph is streamed in "messages" mode,
so the model is called with `stream=True`. Prints what the agent saw as one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's status by its id."""
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


@tool
def issue_refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"refund R-{order_id} issued"


TOOLS = [lookup_order, issue_refund]
model = ChatOpenAI(model="gpt-4o", temperature=0, stream_usage=True).bind_tools(TOOLS)


def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", call_model)
builder.add_node("tools", ToolNode(TOOLS))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile()


def seen(message: BaseMessage) -> dict[str, Any]:
    """What came over the wire: LangChain's own message ids (`lc_run-…`) are made client-side."""
    fields = {"type": message.type, "content": message.content}
    if isinstance(message, AIMessage):
        fields |= {
            "tool_calls": message.tool_calls,
            "response_metadata": message.response_metadata,
            "usage_metadata": message.usage_metadata,
        }
    if message.type == "tool":
        fields["tool_call_id"] = message.tool_call_id  # type: ignore[attr-defined]
    return fields


def main() -> dict[str, Any]:
    inputs = {"messages": [("user", "Please refund order A1001, the shoes don't fit.")]}
    tokens: list[Any] = []
    final: list[BaseMessage] = []
    for mode, chunk in graph.stream(inputs, stream_mode=["messages", "values"]):
        if mode == "messages":
            message, _metadata = chunk
            tokens.append([message.content, getattr(message, "tool_call_chunks", None)])
        else:
            final = chunk["messages"]
    return {
        "final_output": final[-1].content,
        "messages": [seen(m) for m in final],
        "tokens": tokens,
    }


if __name__ == "__main__":
    json.dump(main(), sys.stdout, default=str)
