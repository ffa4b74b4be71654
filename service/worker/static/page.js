// The page at /: picks a language pair from GET /languages and translates with POST /translate (LibreTranslate's
// API). Its URLs are relative, so that it also works behind a proxy that serves the service under a path prefix.
"use strict";

const AUTO = "auto"; // the source "detect the language": its targets are those of every language

const form = document.getElementById("translate-form");
const source = document.getElementById("source");
const target = document.getElementById("target");
const swap = document.getElementById("swap");
const alternatives = document.getElementById("alternatives");
const text = document.getElementById("text");
const translation = document.getElementById("translation");
const detected = document.getElementById("detected");
const alternativesSection = document.getElementById("alternatives-section");
const alternativesList = document.getElementById("alternatives-list");
const translateButton = document.getElementById("translate");
const error = document.getElementById("error");
const apiKeyLabel = document.getElementById("api-key-label");
const apiKey = document.getElementById("api-key"); // shown when the server needs a key; sent as api_key
const tabs = [...document.querySelectorAll('[role="tab"]')];
const file = document.getElementById("file");
const translateFileButton = document.getElementById("translate-file");
const fileProgress = document.getElementById("file-progress");
const fileStatus = document.getElementById("file-status");
const download = document.getElementById("download");

let languages = []; // [{code, name, targets}], as GET /languages answers

// --- the API --------------------------------------------------------------------------------------------------

// The JSON answer to a GET of path, or to a POST of body; an Error with the API's {"error": ...} message otherwise.
async function callApi(path, body) {
  const init = body === undefined
    ? {}
    : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new Error("The server cannot be reached.");
  }
  const answer = await response.json().catch(() => null);
  if (!response.ok) {
    const failure = new Error(answer?.error ?? `The server answered ${response.status} ${response.statusText}.`);
    failure.status = response.status;
    throw failure;
  }
  return answer;
}

// --- languages ------------------------------------------------------------------------------------------------

function nameOf(code) {
  return languages.find((language) => language.code === code)?.name ?? code;
}

function targetsOf(code) {
  if (code === AUTO) return [...new Set(languages.flatMap((language) => language.targets))];
  return languages.find((language) => language.code === code)?.targets ?? [];
}

// Replaces the select's options by [value, label] pairs, keeping `wanted` selected if it is one of them.
function fillSelect(select, options, wanted) {
  select.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
  if (options.some(([value]) => value === wanted)) select.value = wanted;
}

function showTargets(wanted) {
  fillSelect(target, targetsOf(source.value).map((code) => [code, nameOf(code)]), wanted);
  updateSwap();
}

// Swapping needs the reverse pair (so never from auto, which is no target).
function updateSwap() {
  swap.disabled = !targetsOf(target.value).includes(source.value);
}

// The languages, and where to start: the source and target that /frontend/settings names (as LibreTranslate's page
// starts): "auto" into a language that text typed in is most likely not already in.
async function loadLanguages() {
  let start;
  try {
    [languages, start] = await Promise.all([callApi("languages"), callApi("frontend/settings")]);
  } catch (failure) {
    showError(`Cannot load the languages: ${failure.message}`);
    if (failure.status === 503) setTimeout(loadLanguages, 1000); // the model is still loading
    return;
  }
  showError("");
  const sources = languages.filter((language) => language.targets.length > 0);
  const options = [[AUTO, "Detect language"], ...sources.map((language) => [language.code, language.name])];
  apiKeyLabel.hidden = !start.keyRequired;
  fillSelect(source, options, start.language.source.code);
  showTargets(start.language.target.code);
  file.accept = start.supportedFilesFormat.join(",");
  translateButton.disabled = false;
  translateFileButton.disabled = !start.filesTranslation;
}

// --- translating ----------------------------------------------------------------------------------------------

function showError(message) {
  error.textContent = message;
  error.hidden = !message;
}

function showResult(answer) {
  translation.textContent = answer.translatedText;
  const others = answer.alternatives ?? [];
  const items = others.map((other) => Object.assign(document.createElement("li"), { textContent: other }));
  alternativesList.replaceChildren(...items);
  alternativesSection.hidden = others.length === 0;
  const language = answer.detectedLanguage; // when the source is auto
  detected.hidden = !language;
  if (language) {
    const confidence = Number(language.confidence.toFixed(1));
    detected.textContent = `Detected: ${nameOf(language.language)} (${confidence}% confidence)`;
  }
}

async function translate() {
  translateButton.disabled = true;
  form.setAttribute("aria-busy", "true");
  showError("");
  try {
    showResult(await callApi("translate", {
      q: text.value,
      source: source.value,
      target: target.value,
      alternatives: alternatives.valueAsNumber || 0,
      format: "text",
      ...(apiKey.value ? { api_key: apiKey.value } : {}),
    }));
  } catch (failure) {
    showResult({ translatedText: "" });
    showError(failure.message);
  } finally {
    translateButton.disabled = false;
    form.removeAttribute("aria-busy");
  }
}

// The reverse pair, with the translation as the new text.
function swapLanguages() {
  const [from, to] = [source.value, target.value];
  source.value = to;
  showTargets(from);
  if (translation.textContent) {
    text.value = translation.textContent;
    showResult({ translatedText: "" });
  }
}

// --- files ------------------------------------------------------------------------------------------------------

function showTab(chosen) {
  for (const tab of tabs) {
    tab.setAttribute("aria-selected", String(tab === chosen));
    document.getElementById(tab.getAttribute("aria-controls")).hidden = tab !== chosen;
  }
}

// Sends the chosen file to POST /translate_file with an XMLHttpRequest (fetch reports no upload progress): the bar
// shows the upload, then runs without a value while the service translates; the answer's URL is the download.
function translateFile() {
  if (!file.files.length) {
    showError("Choose a file first.");
    return;
  }
  const body = new FormData();
  body.append("file", file.files[0]);
  body.append("source", source.value);
  body.append("target", target.value);
  const request = new XMLHttpRequest();
  request.open("POST", "translate_file");
  request.responseType = "json";
  request.upload.addEventListener("progress", (event) => {
    if (event.lengthComputable) fileProgress.value = event.loaded / event.total;
  });
  request.upload.addEventListener("load", () => {
    fileProgress.removeAttribute("value"); // uploaded: translating, for as long as it takes
    fileStatus.textContent = "Translating…";
  });
  request.addEventListener("loadend", () => {
    translateFileButton.disabled = false;
    fileProgress.hidden = true;
    const url = request.response?.translatedFileUrl;
    if (request.status === 200 && url) {
      const name = decodeURIComponent(new URL(url).pathname.split("/").pop());
      Object.assign(download, { href: url, download: name, textContent: `Download ${name}`, hidden: false });
      fileStatus.textContent = "Translated.";
    } else {
      fileStatus.textContent = "";
      showError(request.response?.error ?? (request.status ? `The server answered ${request.status}.`
        : "The server cannot be reached."));
    }
  });
  translateFileButton.disabled = true;
  download.hidden = true;
  showError("");
  fileProgress.value = 0;
  fileProgress.hidden = false;
  fileStatus.textContent = "Uploading…";
  request.send(body);
}

for (const tab of tabs) tab.addEventListener("click", () => showTab(tab));
translateFileButton.addEventListener("click", translateFile);

form.addEventListener("submit", (event) => {
  event.preventDefault();
  if (!translateButton.disabled) translate(); // disabled: languages not loaded yet, or a translation under way
});
form.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    form.requestSubmit();
  }
});
source.addEventListener("change", () => showTargets(target.value));
target.addEventListener("change", updateSwap);
swap.addEventListener("click", swapLanguages);

loadLanguages();
