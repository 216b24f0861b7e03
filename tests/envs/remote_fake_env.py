#!/usr/bin/env python3
"""Misbehaving environment processes for tests/envs/remote_env_test.cpp.

  --mode silent        accepts connections and never answers
  --mode dies_on_step  answers /v1/info and resets, then exits (closing the connection) on the first step
  --mode bad_answer    steps answer a field that is not in StepResponse ("observation")
  --mode item_error    a batch answers the second item with an error (the others normally)
  --mode no_text       /v1/info lists an environment without a text view
Prints "PORT <n>" first, like crl_remote_env.py.
"""
import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

import crl_remote_env  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    args = parser.parse_args()
    if args.mode == "silent":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        print("PORT", s.getsockname()[1], flush=True)
        time.sleep(60)
        return
    service_class = crl_remote_env.EnvironmentService
    mode = args.mode

    class Fake(service_class):
        def info(self):
            answer = super().info()
            if mode == "no_text":
                answer["environments"][0]["views"] = ["symbolic"]
            return answer

        def step(self, episode_id, body):
            if mode == "dies_on_step":
                os._exit(3)
            answer = super().step(episode_id, body)
            if mode == "bad_answer":
                answer["observation"] = answer.pop("append_text")
            return answer

        def batch_step(self, body):
            if mode == "dies_on_step":
                os._exit(3)
            answer = super().batch_step(body)
            if mode == "item_error" and len(answer["results"]) > 1:
                answer["results"][1] = {"http_status": 409, "error": {"code": "injected", "message": "item failed",
                                                                      "field": "action.text"}}
            return answer

    crl_remote_env.EnvironmentService = Fake
    crl_remote_env.serve(crl_remote_env.GuessNumber, 0)


if __name__ == "__main__":
    main()
