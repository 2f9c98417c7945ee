// One section shown at a time, by the URL's #id; a case's timeline is drawn when it is first shown.
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = { phase: "#ddf4ff", save: "#b6e3ff", collective: "#fb8f44", file: "#57606a",
                   fault: "#cf222e", blocked: "#8250df", cut: "#1f2328", stop: "#0969da", end: "#1f2328",
                   corruption: "#cf222e", "power-loss": "#cf222e" };
  const LOUD = new Set(["fault", "cut", "stop", "corruption", "power-loss"]);

  function show() {
    const id = decodeURIComponent(location.hash.slice(1)) || "top";
    const target = document.getElementById(id) || document.getElementById("top");
    for (const s of document.querySelectorAll("section.page")) s.classList.toggle("shown", s === target);
    const box = target.querySelector(".timeline");
    if (box && !box.firstChild) {
      const data = JSON.parse(target.querySelector("script.timeline-data").textContent);
      // each run's tracks are held once in the page, however many cases draw them
      data.tracks = data.parts.flatMap(id => JSON.parse(document.getElementById(id).textContent));
      const zoom = document.createElement("div");
      zoom.className = "zoom";
      const views = [["whole case", 0, Math.max(...data.runs.map(r => r[2]))], ...data.runs.map(r => [r[0], r[1], r[2]])];
      for (const [name, from, to] of views) {
        const b = document.createElement("button");
        b.type = "button"; b.textContent = name; b.className = "zoom-to";
        b.addEventListener("click", () => { box.replaceChildren(); draw(box, data, from, to); });
        zoom.appendChild(b);
      }
      box.before(zoom);
      draw(box, data, 0, views[0][2]);
    }
    window.scrollTo(0, 0);
  }

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) { const t = document.createElementNS(SVG, "title"); t.textContent = text; e.appendChild(t); }
    return e;
  }

  function draw(box, data, from, to) {
    const rows = [];
    for (const track of data.tracks)
      for (const lane of track.lanes) rows.push({ label: lane.thread === "main" ? track.label : track.label + " · " + lane.thread, run: track.run, lane });
    const left = 230, width = 1000, rowH = 20, top = 22;
    const span = Math.max(1e-3, to - from);
    const x = t => left + Math.min(Math.max((t - from) / span, -0.01), 1.01) * width;
    const height = top + rows.length * rowH + 8;
    const svg = el("svg", { width: left + width + 10, height, class: "timeline-svg" });
    // the runs, as bands with their names and how they ended
    data.runs.forEach(([name, start, stop, ended], i) => {
      svg.appendChild(el("rect", { x: x(start), y: 0, width: Math.max(1, x(stop) - x(start)), height, fill: i % 2 ? "#f6f8fa" : "#fff", class: "run" }, name + ": " + ended));
      // a run near the right edge is labelled leftwards from its end
      const late = x(start) > left + width - 170;
      const label = el("text", { x: late ? Math.min(x(stop), left + width) - 3 : x(start) + 3, y: 14, class: "run-label",
                                 "text-anchor": late ? "end" : "start" });
      label.textContent = name + " (" + (stop - start).toFixed(0) + " ms)";
      svg.appendChild(label);
    });
    const labels = [];
    rows.forEach((row, i) => {
      const y = top + i * rowH;
      const label = el("text", { x: 4, y: y + 14, class: "lane-label" });
      label.textContent = row.label;
      labels.push(label);
      svg.appendChild(el("line", { x1: left, x2: left + width, y1: y + rowH, y2: y + rowH, stroke: "#eaeef2" }));
      for (const [name, cat, s, e] of row.lane.slices) {
        const isPhase = cat === "phase";
        const fill = isPhase ? (/save/.test(name) ? COLORS.save : COLORS.phase) : COLORS[cat] || "#999";
        svg.appendChild(el("rect", { x: x(s), y: isPhase ? y + 2 : y + 8, width: Math.max(0.5, x(e) - x(s)), height: isPhase ? rowH - 4 : 8,
                                     fill, class: "slice slice-" + cat }, name + " (" + (e - s).toFixed(2) + " ms)"));
      }
      for (const [name, cat, at] of row.lane.marks) {
        const cx = x(at);
        if (cat === "file") {
          svg.appendChild(el("line", { x1: cx, x2: cx, y1: y + 3, y2: y + 8, stroke: COLORS.file, class: "mark mark-file" }, name));
        } else if (LOUD.has(cat)) {
          const g = el("g", { class: "mark mark-" + cat }, name);
          g.appendChild(el("line", { x1: cx, x2: cx, y1: y, y2: y + rowH, stroke: COLORS[cat], "stroke-width": 2, "stroke-dasharray": cat === "cut" || cat === "stop" ? "4 2" : "" }));
          g.appendChild(el("path", { d: `M${cx - 5},${y} L${cx + 5},${y} L${cx},${y + 7} Z`, fill: COLORS[cat] }));
          const t = el("text", { x: cx + 6, y: y + rowH - 4, fill: COLORS[cat] });
          t.textContent = name.length > 48 ? name.slice(0, 47) + "…" : name;
          g.appendChild(t);
          svg.appendChild(g);
        } else {
          svg.appendChild(el("circle", { cx, cy: y + rowH / 2, r: 4, fill: COLORS[cat] || "#999", class: "mark mark-" + cat }, name));
        }
      }
    });
    // the lane labels over whatever a zoom pushed to the left edge
    svg.appendChild(el("rect", { x: 0, y: top - 2, width: left - 2, height: height - top, fill: "#fff" }));
    for (const label of labels) svg.appendChild(label);
    box.appendChild(svg);
    if (box.nextElementSibling && box.nextElementSibling.className === "legend") return;
    const legend = document.createElement("div");
    legend.className = "legend";
    legend.innerHTML = [["save phase", COLORS.save], ["other phase", COLORS.phase], ["collective", COLORS.collective],
                        ["file operation", COLORS.file], ["fault", COLORS.fault], ["blocked", COLORS.blocked], ["stopped after a save", COLORS.stop], ["rank ended / cut", COLORS.cut]]
      .map(([n, c]) => `<span><i style="background:${c}"></i>${n}</span>`).join("") + "<span>hover for names and times</span>";
    box.after(legend);
  }

  function copy(button) {
    const text = button.previousElementSibling.textContent;
    const done = () => { button.textContent = "copied"; setTimeout(() => { button.textContent = "copy"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, () => fallback(text, done));
    else fallback(text, done);
  }

  function fallback(text, done) {
    const area = document.createElement("textarea");
    area.value = text; document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); done(); } finally { area.remove(); }
  }

  document.addEventListener("click", e => { if (e.target.matches("button.copy")) copy(e.target); });
  window.addEventListener("hashchange", show);
  show();
})();
