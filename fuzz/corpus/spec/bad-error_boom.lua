-- expect: :2: boom$
error("boom")
