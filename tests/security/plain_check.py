"""A PLAIN check for ``sasl.server.callback.handler.class`` (the broker imports it by name)."""


def check(username: str, password: str) -> bool:
    if username == "broken":
        raise RuntimeError("the directory service is down")
    return password == username[::-1] + "!"
