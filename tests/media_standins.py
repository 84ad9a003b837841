"""Local stand-ins for a vision model and a speech model that really read the bytes they are sent: the "vision
model" answers with the image's text (tesseract OCR), the "speech model" transcribes touch-tone audio (DTMF,
decoded by FFT). Used to run the GAIA sample set's image and audio tasks end to end, offline."""

from __future__ import annotations

import base64
import io
import json
import re
import threading
import wave
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aworld_gym.envs.gaia.sample_files import DTMF


def ocr(image: bytes) -> str:
    import pytesseract
    from PIL import Image

    return pytesseract.image_to_string(Image.open(io.BytesIO(image)))


def dtmf_digits(wav: bytes) -> str:
    """The digits of a touch-tone recording: tones are the loud stretches between silences."""
    import numpy as np

    with wave.open(io.BytesIO(wav)) as w:
        rate, data = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(float)
    loud = np.abs(data) > 1000
    digits, i = [], 0
    while i < len(data):
        if not loud[i]:
            i += 1
            continue
        j = i
        while j < len(data) and (loud[j] or loud[j : j + 40].any()):
            j += 1
        spectrum = np.abs(np.fft.rfft(data[i:j]))
        freqs = np.fft.rfftfreq(j - i, 1 / rate)
        power = {f: spectrum[np.argmin(np.abs(freqs - f))] for f in {f for pair in DTMF.values() for f in pair}}
        low = max((f for f in power if f < 1000), key=power.get)
        high = max((f for f in power if f > 1000), key=power.get)
        digits += [d for d, pair in DTMF.items() if pair == (low, high)]
        i = j
    return "".join(digits)


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: object) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def serve_v1(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    """``handler`` on 127.0.0.1 in a daemon thread; (the server, its ``/v1`` base URL)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


class ReferenceModels:
    """``/v1/chat/completions`` (OCR of the image) and ``/v1/audio/transcriptions`` (DTMF) on 127.0.0.1."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path.endswith("/chat/completions"):
                    parts = json.loads(body)["messages"][0]["content"]
                    uri = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
                    text = ocr(base64.b64decode(uri.split(",", 1)[1]))
                    reply = {"choices": [{"message": {"role": "assistant", "content": f"The sign reads: {text}"}}]}
                else:
                    wav = re.search(rb"\r\n\r\n(RIFF.*)\r\n--", body, re.DOTALL).group(1)
                    reply = {"text": "Your PIN is " + " ".join(dtmf_digits(wav)) + "."}
                send_json(self, 200, reply)

        self.server, self.url = serve_v1(Handler)

    def __enter__(self) -> ReferenceModels:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
