-- expect: :2: 'os' is not available in a spec
os.execute("true")
