"""The support desk's tools: a fake order book, no network, no credentials."""

ORDERS = {f"ord-{n:03d}": {"status": "delivered", "amount": 10 + n} for n in range(1, 100)}


def lookup_order(order_id):
    return {"order_id": order_id, **ORDERS.get(order_id, {"status": "unknown"})}


def check_policy(order_id):
    return {"order_id": order_id, "refundable": True, "window_days": 30}


def issue_refund(order_id):
    return {"order_id": order_id, "refund": "issued"}


def search(query):
    return {"query": query, "hits": []}


def delete_customer(order_id):
    return {"order_id": order_id, "deleted": True}
