#!/usr/bin/env python3
"""A small agent harness that trains through the compaction gateway (server/gateway, PROTOCOL.md section 5).

Standard library only. The harness is what people train: an OpenAI-style chat loop with one shell-like tool.
The tool here is one of crl's own environments (default `synthetic`), driven through crl_client's step API;
the model calls go to the gateway's OpenAI route (`{server}/v1/sessions/{id}/v1/chat/completions`, or with
`--api responses` the Responses API's `.../v1/responses` as Codex-style harnesses call it, or with
`--api responses-chained` the same chained by previous_response_id), which compacts the
growing conversation with the policy's own summaries and records training-ready segments. Per episode the
harness posts the environment's reward to the gateway and fetches the export.

    python3 clients/python/examples/agent_harness.py --server http://127.0.0.1:7411 --episodes 4 --out runs/

The model may answer with a Qwen-style tool call (`run` with {"command": ...}) or with plain text; either is
the command sent to the environment, and the observation goes back as the tool result (or a user message).
See README.md next to this file for the servers to start.
"""
import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import crl_client  # noqa: E402

TOOLS = [{"type": "function",
          "function": {"name": "run", "description": "Send one command to the environment; returns what it prints.",
                       "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                      "required": ["command"]}}}]

COMMAND_BYTES = 4096  # the longest command sent to the environment, in UTF-8 bytes


def bounded(command):
    """The command cut to COMMAND_BYTES UTF-8 bytes (at a character boundary)."""
    return command.encode()[:COMMAND_BYTES].decode(errors="ignore")


_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.S)


def turns_of(text):
    """The (role, content) turns of an environment's ChatML text (its prompt or an appended observation)."""
    return [(m.group(1), m.group(2)) for m in _TURN.finditer(text)]


def post_json(url, body, timeout=120.0):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise GatewayError(url, e.code, e.read().decode(errors="replace")) from None


def post_stream(url, body, timeout=120.0):
    """POST a streamed chat call and join its server-sent events as the OpenAI SDK does: the deltas' content
    (and reasoning_content) in order, tool calls by index with their arguments joined."""
    request = urllib.request.Request(url, data=json.dumps(dict(body, stream=True)).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    message = {"role": "assistant", "content": None}
    calls = []
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            for raw in response:
                line = raw.decode().rstrip("\r\n")
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:  # a failure after the stream began
                    raise GatewayError(url, 200, json.dumps(chunk))
                for choice in chunk.get("choices", []):
                    delta = choice.get("delta", {})
                    for key in ("content", "reasoning_content"):
                        if delta.get(key):
                            message[key] = (message.get(key) or "") + delta[key]
                    for call in delta.get("tool_calls", []):
                        while len(calls) <= call["index"]:
                            calls.append({"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                        joined = calls[call["index"]]
                        joined["id"] = call.get("id") or joined["id"]
                        for key in ("name", "arguments"):
                            joined["function"][key] += call.get("function", {}).get(key) or ""
    except urllib.error.HTTPError as e:
        raise GatewayError(url, e.code, e.read().decode(errors="replace")) from None
    if calls:
        message["tool_calls"] = calls
    return message


class GatewayError(RuntimeError):
    def __init__(self, url, status, body):
        super().__init__(f"POST {url}: {status} {body}")
        try:
            self.code = json.loads(body)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            self.code = ""


def delete(url, timeout=60.0):
    """DELETE url; a session that is not there (404) is fine."""
    request = urllib.request.Request(url, method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise GatewayError(url, e.code, e.read().decode(errors="replace")) from None


def get_json(url, timeout=60.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def command_of(arguments):
    """The command of a `run` call's arguments (JSON text; the text itself when it is not an object)."""
    try:
        return json.loads(arguments).get("command", "")
    except (ValueError, AttributeError):
        return arguments


class ChatConversation:
    """An OpenAI chat completions loop: the whole message list every call (base_url = {server}/v1/sessions/{id}/v1)."""

    stream = False  # ask for `stream: true` and join the chunks (StreamedChatConversation)

    def __init__(self, base_url, model, max_tokens, template_kwargs=None):
        self.base_url, self.model, self.max_tokens = base_url.rstrip("/"), model, max_tokens
        self.template_kwargs = template_kwargs
        self.messages = []

    def add(self, role, text):
        self.messages.append({"role": role, "content": text})

    def ask(self):
        """One model call: (the command, the id of the tool call that carried it or None)."""
        body = {"model": self.model, "messages": self.messages, "tools": TOOLS, "max_tokens": self.max_tokens}
        if self.template_kwargs:  # vLLM's extra field, sent every call as harnesses do (Qwen3: enable_thinking)
            body["chat_template_kwargs"] = self.template_kwargs
        if self.stream:
            reply = post_stream(self.base_url + "/chat/completions", body)
        else:
            reply = post_json(self.base_url + "/chat/completions", body)["choices"][0]["message"]
        self.messages.append(reply)  # the harness's copy of the answer, as every agent keeps it
        calls = reply.get("tool_calls") or []
        if calls:
            return command_of(calls[0]["function"]["arguments"]), calls[0].get("id", "")
        return reply.get("content") or "", None

    def observe(self, text, call_id):
        if call_id is None:
            self.add("user", text)
        else:
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})


class ResponsesConversation:
    """An OpenAI Responses API loop as Codex-style harnesses run it (store: false): instructions, the whole
    input item list every call, the answer's output items appended to it."""

    def __init__(self, base_url, model, max_tokens):
        self.base_url, self.model, self.max_tokens = base_url.rstrip("/"), model, max_tokens
        self.instructions, self.items = None, []

    def add(self, role, text):
        if role == "system" and self.instructions is None and not self.items:
            self.instructions = text
        else:
            self.items.append({"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]})

    def request(self):
        tools = [{"type": "function", **tool["function"]} for tool in TOOLS]
        return {"model": self.model, "instructions": self.instructions, "input": self.items, "tools": tools,
                "max_output_tokens": self.max_tokens, "store": False}

    def answered(self, response):
        """What the loop keeps of an answer besides its output items (nothing: the next call resends all)."""

    def ask(self):
        response = post_json(self.base_url + "/responses", self.request())
        output = response["output"]
        self.answered(response)
        self.items.extend(output)  # the harness's copy of the answer
        calls = [item for item in output if item["type"] == "function_call"]
        if calls:
            return command_of(calls[0]["arguments"]), calls[0]["call_id"]
        text = [part["text"] for item in output if item["type"] == "message" for part in item["content"]]
        return "".join(text), None

    def observe(self, text, call_id):
        if call_id is None:
            self.add("user", text)
        else:
            self.items.append({"type": "function_call_output", "call_id": call_id, "output": text})


class ChainedResponsesConversation(ResponsesConversation):
    """The same Responses loop chained, as Codex can send it: after the first answer every call names the
    response it follows (previous_response_id) and sends only the items added since; the gateway's session
    holds the rest (server/gateway/response_chain.h)."""

    def __init__(self, base_url, model, max_tokens):
        super().__init__(base_url, model, max_tokens)
        self.previous, self.sent = None, 0

    def request(self):
        body = super().request()
        if self.previous is not None:
            body["input"] = self.items[self.sent:]
            body["previous_response_id"] = self.previous
        return body

    def answered(self, response):
        self.previous = response["id"]
        self.sent = len(self.items) + len(response["output"])


class StreamedChatConversation(ChatConversation):
    """The same loop with `stream: true`, each answer joined from its chunks (with an SGLang upstream the
    gateway sends them as the model samples)."""

    stream = True


CONVERSATIONS = {"chat": ChatConversation, "chat-stream": StreamedChatConversation,
                 "responses": ResponsesConversation, "responses-chained": ChainedResponsesConversation}


def run_episode(args, session, index):
    """One episode: returns (session id, reward, export). Deterministic per --seed: the gateway session is
    created with that seed (its sampling streams are keyed by seed, session id and sample index), the
    environment with it too, and a leftover session of an earlier run with the same id is deleted first."""
    sid = f"{args.prefix}-{index}"
    delete(f"{args.server}/v1/sessions/{sid}")
    post_json(f"{args.server}/v1/sessions", {"session_id": sid, "seed": args.seed, "sample_index": index,
                                             "metadata": {"harness_seed": str(args.seed)}})
    # The environment's own budget is not the model's: a command is whatever text the model wrote (re-tokenized
    # by the environment, possibly into more tokens than were sampled), so its per-turn cap is wide and a
    # longer command is cut to that many UTF-8 bytes (at most one token per byte), as a shell tool bounds
    # its input.
    env = session.create(args.env, split=args.split, index=index, seed=args.seed,
                         budget={"capacity": 65536, "reserve": 2 * COMMAND_BYTES, "per_turn_cap": COMMAND_BYTES})
    turns = [("system" if role == "system" else "user", content) for role, content in turns_of(env.prompt_text)]
    if not turns:
        turns = [("user", env.prompt_text)]
    turns[0] = (turns[0][0], turns[0][1] + "\nUse the run tool (or answer with the command alone) to act.")
    conversation = CONVERSATIONS[args.api](f"{args.server}/v1/sessions/{sid}/v1", args.model, args.max_tokens)
    if args.chat_template_kwargs:
        conversation.template_kwargs = args.chat_template_kwargs
    for role, content in turns:
        conversation.add(role, content)
    for _ in range(args.max_turns):
        if env.done:
            break
        try:
            command, call_id = conversation.ask()
        except GatewayError as e:
            if e.code != "context_length_exceeded":
                raise
            break  # the gateway's budget is spent (max compactions): the rollout is truncated
        answer = env.step(text=bounded(command.strip()))
        while answer.get("kind") == "compaction_request":  # the environment's own window: not used here
            answer = env.step(text="(none)", kind="summary")
        observation = "\n".join(c for _, c in turns_of(answer.get("append_text", ""))) or answer.get("append_text", "")
        conversation.observe(observation, call_id)
    reward = env.reward if env.done else 0.0
    status = "completed" if env.done else "truncated"
    post_json(f"{args.server}/v1/sessions/{sid}/reward", {"reward": reward, "status": status})
    exported = get_json(f"{args.server}/v1/sessions/{sid}/export")
    delete(f"{args.server}/v1/sessions/{sid}")
    env.delete()
    return sid, reward, exported


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="http://127.0.0.1:7411", help="crl serve --llm ... (env and gateway)")
    parser.add_argument("--env", default="synthetic")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-turns", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--model", default="policy")
    parser.add_argument("--api", choices=sorted(CONVERSATIONS), default="chat",
                        help="chat: /v1/chat/completions; chat-stream: the same streamed (stream: true); "
                             "responses: the Responses API's /v1/responses; responses-chained: the same with "
                             "previous_response_id")
    parser.add_argument("--chat-template-kwargs", type=json.loads, default=None,
                        help="JSON object sent as chat_template_kwargs on every chat call, e.g. "
                             "'{\"enable_thinking\": false}' for Qwen3 without thinking (--api chat only)")
    parser.add_argument("--prefix", default="harness", help="session ids are PREFIX-N")
    parser.add_argument("--out", default="", help="directory for the exports (PREFIX-N.json)")
    args = parser.parse_args(argv)
    if args.chat_template_kwargs is not None and (not args.api.startswith("chat") or
                                                  not isinstance(args.chat_template_kwargs, dict)):
        parser.error("--chat-template-kwargs takes a JSON object, with --api chat")
    session = crl_client.Session(args.server)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    for i in range(args.episodes):
        sid, reward, exported = run_episode(args, session, i)
        segments = exported.get("segments", [])
        kinds = [s.get("kind", "execution") for s in segments]
        print(json.dumps({"session": sid, "reward": reward, "segments": len(segments),
                          "summaries": kinds.count("summary")}), flush=True)
        if args.out:
            path = os.path.join(args.out, sid + ".json")
            with open(path + ".tmp", "w") as f:
                json.dump(exported, f)
            os.replace(path + ".tmp", path)
    session.close()


if __name__ == "__main__":
    main()
