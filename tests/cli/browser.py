"""A person at a browser, for maasctl's `login --browser` (started through $BROWSER by Python's
webbrowser): opens the authorization URL, signs in on the provider's login page as
$MAASCTL_TEST_USERNAME and follows the redirects to maasctl's loopback callback."""
import os
import sys
import urllib.parse

import requests

url = sys.argv[1]
idp = requests.Session()
response = idp.get(url, allow_redirects=False)
response = idp.post(urllib.parse.urljoin(url, response.headers["Location"]), data={
    "username": os.environ["MAASCTL_TEST_USERNAME"],
    "password": os.environ["MAASCTL_TEST_PASSWORD"]}, allow_redirects=False)
while "/callback?" not in response.headers["Location"]:
    response = idp.get(urllib.parse.urljoin(url, response.headers["Location"]),
                       allow_redirects=False)
requests.get(response.headers["Location"], timeout=30)  # maasctl's one-shot server
